"""Placement: per-machine books (in memory or Redis), clamping, and the placer that grants node calls."""

from fluksio.placement.backend import Books, MachineView
from fluksio.placement.memory import MemoryBooks
from fluksio.placement.placer import Placer, Request, Waiting

__all__ = ["Books", "MachineView", "MemoryBooks", "Placer", "Request", "Waiting"]
