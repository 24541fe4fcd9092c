"""Placement: per-machine books, clamping, and the placer that grants node calls their resources."""

from fluksio.placement.placer import Placer, Request, Waiting

__all__ = ["Placer", "Request", "Waiting"]
