"""A driver's ready calls that wait for a machine, and the words that say why. Pure: no Celery, no SQL.

Ready units (nodes, or elements of mapped nodes) queue by the kind of their
request (resources, device, policy): when the head of a queue cannot be placed,
neither can the rest, so the placer is asked once per kind, not once per call —
a 10,000-element map waiting for one busy machine costs one claim per wake-up.
Who waits is counted per node as units come and go, so saying why costs the
same for ten elements as for ten thousand.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterator

from fluksio.flows.node import NodeSpec
from fluksio.schemas import DevicePolicy, Resources, split_unit

#: What makes two calls interchangeable to the placer: what they ask for, where, and from which pool.
RequestKind = tuple[Resources, str | None, DevicePolicy, str | None]
#: How long a run waits for machines before its ``status_reason`` says so, in seconds. In a busy installation
#: most calls wait a moment for a slot: writing the reason and then its end costs two store writes per call
#: (benchmarks/many_runs.py: a fifth of a driver's time), for a reason nobody has time to read.
QUIET_S = 0.5


def kind_of(spec: NodeSpec, asks: Resources | None = None) -> RequestKind:
    """The kind of a call of ``spec`` that asks for ``asks`` (default: what the node declares)."""
    return (asks or spec.resources, spec.device, spec.device_policy, spec.pool)


class WaitLists:
    """Ready units not yet placed, one FIFO per request kind, and why the head of each blocked one waits.

    ``sizes(node)`` says how many elements a mapped node has (``None`` for a node that is not mapped).
    Invariant: a kind has a reason in ``waiting`` only while its queue's head could not be placed at
    the last try; a kind whose queue emptied has none.
    """

    def __init__(self, sizes: Callable[[str], int | None] = lambda node: None, quiet_s: float = 0.0) -> None:
        self.queues: dict[RequestKind, deque[str]] = {}
        #: Why the head of each blocked queue waits, in words a user reads.
        self.waiting: dict[RequestKind, str] = {}
        #: The kind of wait of each blocked queue: its reason, less what changes while it waits the same way
        #: (who is first in the installation's order, how many of a pool's slots are in use).
        self._category: dict[RequestKind, str] = {}
        self._sizes = sizes
        #: Per kind, how many units of each node are in its queue.
        self._queued: dict[RequestKind, Counter[str]] = {}
        #: What :meth:`status_reason` last said, the kinds of wait it named, and when (``time.monotonic()``).
        self._said: str | None = None
        self._kinds: tuple[str, ...] = ()
        self._said_at = float("-inf")
        #: A wait is said once it has lasted this long (seconds); see :data:`QUIET_S`.
        self.quiet_s = quiet_s
        #: When the run began to wait with nothing said of it yet (``time.monotonic()``), if it waits.
        self._unsaid_since: float | None = None

    def add(self, unit: str, kind: RequestKind) -> str | None:
        """Queue a ready unit; returns the reason it waits when it is the first of its node to join a queue
        that waits already (the others of its node were announced with it)."""
        self.queues.setdefault(kind, deque()).append(unit)
        counts = self._queued.setdefault(kind, Counter())
        node = split_unit(unit)[0]
        counts[node] += 1
        return self.waiting.get(kind) if counts[node] == 1 else None

    def blocked(self, kind: RequestKind, reason: str, category: str | None = None) -> list[str]:
        """The head of ``kind``'s queue cannot be placed, for ``reason``, a wait of ``category`` (default: the
        reason itself). Returns the nodes queued there when the category is new (to announce once each), else
        nothing: a waiting call's turn moving up changes its reason at every give-back in the installation, and
        is not news to announce (nor to write at once: :meth:`status_reason`)."""
        category = category or reason
        new = self._category.get(kind) != category
        self.waiting[kind] = reason
        self._category[kind] = category
        return list(self._queued.get(kind, ())) if new else []

    def placed(self, kind: RequestKind) -> None:
        """The head of ``kind``'s queue was placed: it leaves the queue (and the queue stops waiting if empty)."""
        queue = self.queues[kind]
        node = split_unit(queue.popleft())[0]
        counts = self._queued[kind]
        counts[node] -= 1
        if not counts[node]:
            del counts[node]
        if not queue:
            self.waiting.pop(kind, None)
            self._category.pop(kind, None)

    def heads(self) -> Iterator[tuple[RequestKind, str]]:
        """The kind and first unit of each queue with units in it."""
        for kind, queue in self.queues.items():
            if queue:
                yield kind, queue[0]

    def waiting_heads(self) -> list[str]:
        """The first unit of every queue that waits: the calls listed as waiting with the placer."""
        return [queue[0] for kind, queue in self.queues.items() if kind in self.waiting and queue]

    def waiting_of(self, kind: RequestKind, node: str) -> int:
        """How many units of ``node`` wait in ``kind``'s queue."""
        return self._queued.get(kind, Counter())[node]

    def describe(self, kind: RequestKind, node: str) -> str:
        """Who of ``node`` waits in ``kind``'s queue: ``count: 12 of 40 elements``, or the node's name."""
        total = self._sizes(node)
        if total is None:
            return node
        return f"{node}: {self.waiting_of(kind, node)} of {total} elements"

    def say_again(self) -> None:
        """Make the next :meth:`status_reason` due, whatever it says (the run's reason was written elsewhere)."""
        self._said, self._kinds = "\0", ()

    def clear(self) -> None:
        self.queues.clear()
        self.waiting.clear()
        self._category.clear()
        self._queued.clear()

    def status_reason(self, now: float, every_s: float) -> tuple[bool, str | None]:
        """``(due, reason)``: whether the run's ``status_reason`` should be written now, and what it says.

        Due at once when the kinds of wait change (their categories: :meth:`blocked`); when only who waits, or
        the details of the same wait, change (a fan-out moving through its queue, a call's turn moving up), at
        most once every ``every_s`` seconds — a write per dispatched call would
        cost the driver more than the dispatch. A wait that begins while nothing is said is said only once
        it has lasted ``quiet_s`` (:meth:`said_due_at`); one that ends sooner is never written, nor is its end.
        ``now`` is ``time.monotonic()``.
        """
        parts = []
        for kind, why in self.waiting.items():
            queue = self.queues.get(kind)
            if not queue:
                continue
            head = split_unit(queue[0])[0]
            if self._sizes(head) is not None:
                others = len(queue) - self.waiting_of(kind, head)
                tail = f" (and {others} more call(s))" if others else ""
                parts.append(f"{self.describe(kind, head)}{tail} {why}")
            else:
                who = head if len(queue) == 1 else f"{head} and {len(queue) - 1} more node(s)"
                parts.append(f"{who}: {why}")
        reason = "; ".join(parts) or None
        if reason:
            reason = reason[0].upper() + reason[1:]
        kinds = tuple(sorted(self._category.get(kind, why) for kind, why in self.waiting.items()
                             if self.queues.get(kind)))
        if self._said is not None or reason is None:
            self._unsaid_since = None
        elif self._unsaid_since is None:
            self._unsaid_since = now
        if self._unsaid_since is not None and now - self._unsaid_since < self.quiet_s:
            return False, reason  # only just began to wait: said if it lasts
        due = reason != self._said and (kinds != self._kinds or now - self._said_at >= every_s)
        if due:
            self._said, self._kinds, self._said_at = reason, kinds, now
            self._unsaid_since = None
        return due, reason

    def said_due_at(self) -> float | None:
        """When a wait not said yet will be (``time.monotonic()``), so that the driver looks again then."""
        return None if self._unsaid_since is None else self._unsaid_since + self.quiet_s
