"""Machines and time as the placer's tests set them up: a machine's inventory, and a clock that moves only
when a test says so."""

from __future__ import annotations

from fluksio.schemas import Inventory


def machine(name, cpus=4, gpus=(), ram_mb=8000, labels=()) -> Inventory:
    return Inventory(name=name, cpus=cpus, gpus=tuple(gpus), ram_mb=ram_mb, labels=tuple(labels))


class Clock:
    """Seconds since the epoch that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
