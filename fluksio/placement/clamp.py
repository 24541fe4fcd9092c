"""Cutting down a request no machine could ever grant. Pure.

The rule from the original system: clamp to the largest machine that exists
(provisioner shapes count), settling GPUs first, and warn, rather than leave a
run waiting forever. A request a machine could grant once it is idle is never
clamped: that machine is waited for.
"""

from __future__ import annotations

from collections.abc import Sequence

from fluksio.schemas import Resources


def fits(request: Resources, shape: Resources) -> bool:
    return request.cpus <= shape.cpus and request.gpus <= shape.gpus and request.ram_mb <= shape.ram_mb


def clamp(request: Resources, shapes: Sequence[Resources]) -> tuple[Resources, str | None]:
    """The request, or the largest one some shape can grant, with a warning saying what was cut."""
    if not shapes or any(fits(request, shape) for shape in shapes):
        return request, None
    gpus = min(request.gpus, max(s.gpus for s in shapes))
    pool = [s for s in shapes if s.gpus >= gpus]
    cpus = min(request.cpus, max(s.cpus for s in pool))
    pool = [s for s in pool if s.cpus >= cpus]
    ram_mb = min(request.ram_mb, max(s.ram_mb for s in pool))
    clamped = Resources(cpus=cpus, gpus=gpus, ram_mb=ram_mb)
    return clamped, (
        f"requested {request.describe()} but the largest machine offers at most {clamped.describe()}; "
        "clamped to fit"
    )
