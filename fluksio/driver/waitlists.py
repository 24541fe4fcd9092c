"""A driver's ready nodes that wait for a machine, and the words that say why. Pure: no Celery, no SQL.

Ready nodes queue by the kind of their request (resources, device, policy):
when the head of a queue cannot be placed, neither can the rest, so the placer
is asked once per kind, not once per node — a 10,000-node fan-out waiting for
one busy machine costs one claim per wake-up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from fluksio.flows.node import NodeSpec
from fluksio.schemas import DevicePolicy, Resources

#: What makes two calls interchangeable to the placer.
RequestKind = tuple[Resources, str | None, DevicePolicy]


def kind_of(spec: NodeSpec) -> RequestKind:
    return (spec.resources, spec.device, spec.device_policy)


class WaitLists:
    """Ready nodes not yet placed, one FIFO per request kind, and why the head of each blocked one waits.

    Invariant: a kind has a reason in ``waiting`` only while its queue's head could not be placed at
    the last try; a kind whose queue emptied has none.
    """

    def __init__(self) -> None:
        self.queues: dict[RequestKind, deque[str]] = {}
        #: Why the head of each blocked queue waits, in words a user reads.
        self.waiting: dict[RequestKind, str] = {}
        #: What :meth:`status_reason` last said, the kinds of wait it named, and when (``time.monotonic()``).
        self._said: str | None = None
        self._kinds: tuple[str, ...] = ()
        self._said_at = float("-inf")

    def add(self, node: str, kind: RequestKind) -> str | None:
        """Queue a ready node; returns the reason it waits when it joins a queue that waits already."""
        self.queues.setdefault(kind, deque()).append(node)
        return self.waiting.get(kind)

    def blocked(self, kind: RequestKind, reason: str) -> bool:
        """The head of ``kind``'s queue cannot be placed, for ``reason``; returns whether the reason is new."""
        new = self.waiting.get(kind) != reason
        self.waiting[kind] = reason
        return new

    def placed(self, kind: RequestKind) -> None:
        """The head of ``kind``'s queue was placed: it leaves the queue (and the queue stops waiting if empty)."""
        queue = self.queues[kind]
        queue.popleft()
        if not queue:
            self.waiting.pop(kind, None)

    def heads(self) -> Iterator[tuple[RequestKind, str]]:
        """The kind and first node of each queue with nodes in it."""
        for kind, queue in self.queues.items():
            if queue:
                yield kind, queue[0]

    def waiting_heads(self) -> list[str]:
        """The first node of every queue that waits: the calls listed as waiting with the placer."""
        return [queue[0] for kind, queue in self.queues.items() if kind in self.waiting and queue]

    def clear(self) -> None:
        self.queues.clear()
        self.waiting.clear()

    def status_reason(self, now: float, every_s: float) -> tuple[bool, str | None]:
        """``(due, reason)``: whether the run's ``status_reason`` should be written now, and what it says.

        Due at once when the kinds of wait change; when only who waits changes (a fan-out moving
        through its queue), at most once every ``every_s`` seconds — a write per dispatched node would
        cost the driver more than the dispatch. ``now`` is ``time.monotonic()``.
        """
        parts = []
        for kind, why in self.waiting.items():
            queue = self.queues.get(kind)
            if queue:
                who = queue[0] if len(queue) == 1 else f"{queue[0]} and {len(queue) - 1} more node(s)"
                parts.append(f"{who}: {why}")
        reason = "; ".join(parts) or None
        if reason:
            reason = reason[0].upper() + reason[1:]
        kinds = tuple(sorted(why for kind, why in self.waiting.items() if self.queues.get(kind)))
        due = reason != self._said and (kinds != self._kinds or now - self._said_at >= every_s)
        if due:
            self._said, self._kinds, self._said_at = reason, kinds, now
        return due, reason
