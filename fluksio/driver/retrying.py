"""Whether a failed call is tried again, when, and asking for what. Pure: no Celery, no SQL.

A node's ``retries`` bound how often; ``retry_on`` limits retries to failures the node raised of those
exception classes (matched by name, as failures cross processes: ``flows.node.error_types``) — a call
that failed around the node (its machine lost, its completion lost, the store down) carries no exception
of the node's and is retried as before; ``retry_backoff_s`` spaces them out; ``escalate_ram`` makes a
retry after running out of memory ask for more RAM (the placer clamps it to the largest machine).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fluksio.flows.node import NodeSpec
from fluksio.messages import Completion
from fluksio.schemas import Resources

#: How far a wait strays from ``retry_backoff_s · 2^(k-1)``, either way: ±25 %.
JITTER = 0.25


@dataclass(frozen=True)
class Retry:
    """A failed call tried again: its next attempt, after how long, asking for what, and why, in words."""

    attempt: int
    #: Seconds to wait, holding no machine, before the retry is placed.
    delay_s: float
    #: What the retry asks for.
    asks: Resources
    note: str


def matches(retry_on: Sequence[str], error_types: Sequence[str]) -> bool:
    """Whether a failure of these types (``module.Class`` or a builtin's name, class first, then its bases) is
    one ``retry_on`` names, by its name or its full name."""
    return any(kind == name or kind.endswith("." + name) for kind in error_types for name in retry_on)


def backoff_s(spec: NodeSpec, retry: int, uniform: Callable[[], float] = random.random) -> float:
    """How long retry ``retry`` (1 for the first) waits: ``retry_backoff_s · 2^(retry-1)`` ±25 %, at most
    ``retry_backoff_max_s`` seconds. ``uniform`` draws from [0, 1)."""
    if not spec.retry_backoff_s:
        return 0.0
    base = spec.retry_backoff_s * 2.0 ** min(retry - 1, 64)  # past 2^64 the cap has long decided
    return min(spec.retry_backoff_max_s, base * (1 - JITTER + 2 * JITTER * uniform()))


def escalated(asked: Resources, factor: float) -> Resources:
    """``asked`` with its RAM multiplied by ``factor`` (rounded up to a whole MB)."""
    return asked.model_copy(update={"ram_mb": math.ceil(asked.ram_mb * factor)})


def plan_retry(spec: NodeSpec, completion: Completion, tries: int, asked: Resources,
               uniform: Callable[[], float] = random.random) -> tuple[Retry | None, str | None]:
    """The retry of a failed call that was the ``tries``-th of its unit in this drive and asked for ``asked``,
    or ``None``; and a note for its row saying what happens next (``None``: nothing to say)."""
    if tries > spec.retries:
        return None, None
    escalate = completion.oom and spec.escalate_ram is not None
    if (spec.retry_on is not None and completion.error_types and not escalate
            and not matches(spec.retry_on, completion.error_types)):
        kind = completion.error_types[0].rpartition(".")[2]
        return None, f"not retried: {kind} is not among retry_on ({', '.join(spec.retry_on)})"
    asks = escalated(asked, spec.escalate_ram) if escalate and spec.escalate_ram else asked
    delay = backoff_s(spec, tries, uniform)
    parts = [f"retried as attempt {completion.attempt + 1} of {completion.attempt - tries + 1 + spec.retries}"]
    if delay:
        parts.append(f"after {delay:.1f} s")
    if asks != asked:
        parts.append(f"out of memory with {asked.ram_mb} MB RAM: it asks for {asks.ram_mb} MB")
    return Retry(completion.attempt + 1, delay, asks, ", ".join(parts)), None
