"""Which of this process's waiting drivers a change of the books wakes: the first waiting call of each kind.

Every give-back, attach, detach and turn given up anywhere in the installation reaches every process
(``Books.on_change``). Waking every driver with a call waiting made each of them claim, and all but one
lose: with 32 drivers waiting on 4 slots, ~30 refused claims per give-back, each a script that plays the
installation's order through (``benchmarks/many_runs.py``: 2,100–2,400 Redis commands per run).

Calls of one kind (``turns.Kind``) are interchangeable and granted in order: when the first of them cannot
go, none after it can. So a change wakes the first waiting call of each kind in this process, and a
waiting call granted wakes the next of its kind, since what freed may hold more than one. Other processes
do the same for their calls. A *turn* (a call that others were refused behind was granted, or gave up
its place) frees nothing: it wakes the first of a kind only if that one was refused behind another
call (``Why.BEHIND``) — one refused for want of machines or of a pool's slot still wants them. What a
lost wake-up would cost is bounded anyway: each driver tries its waiting calls again every lease interval.

With several processes, each waking its own first of a kind made all but one of them claim in vain. Books
that know the installation's order (Redis) name the calls a change may let go — the first waiting call of
each kind, and after a grant that leaves room, the next of its kind — and only the process holding a named
call wakes it.

Listeners added without a run hear every change (a run waiting for a labelled machine to attach).
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fluksio.placement.turns import Kind

Listener = Callable[[], None]


@dataclass(frozen=True)
class _Waiter:
    run_id: str
    #: ``None``: refused before its kind was known (the machines kept changing); woken by every change.
    kind: Kind | None
    #: Its place in the installation's order (``turns.order_key``).
    order: str
    #: Its last refusal was ``Why.BEHIND``: it would fit, but calls ahead of it could use what is free.
    behind: bool = False


class Wakeups:
    """Listeners, and this process's waiting calls by kind in the installation's order. Thread-safe; the
    listeners it returns are called by the placer outside every lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._everything: list[Listener] = []
        #: The driver of each run in this process that waits on the placer.
        self._runs: dict[str, Listener] = {}
        self._waiters: dict[str, _Waiter] = {}
        #: Per kind, ``(order, call_id)`` of its waiting calls, sorted: the first is the one to wake.
        self._queues: dict[Kind | None, list[tuple[str, str]]] = {}

    def add(self, listener: Listener, run_id: str | None = None) -> None:
        """Call ``listener`` on every change, or (with ``run_id``) when one of the run's calls may go now."""
        with self._lock:
            if run_id is None:
                self._everything.append(listener)
            else:
                self._runs[run_id] = listener

    def remove(self, listener: Listener) -> None:
        """Stop calling ``listener``; the calls of its run are no longer waited on here."""
        with self._lock:
            if listener in self._everything:
                self._everything.remove(listener)
            for run_id in [run_id for run_id, known in self._runs.items() if known is listener]:
                del self._runs[run_id]
                for call_id in [call_id for call_id, waiter in self._waiters.items() if waiter.run_id == run_id]:
                    self._drop(call_id)

    def waits(self, call_id: str, run_id: str | None, kind: Kind | None, order: str, behind: bool = False) -> None:
        """The call was refused (``behind``: for ``Why.BEHIND``): it waits, keeping the place it first had."""
        if run_id is None:
            return  # nobody to wake for it but listeners of every change
        with self._lock:
            known = self._waiters.get(call_id)
            if known is not None and known.kind == kind:
                if known.behind != behind:
                    self._waiters[call_id] = dataclasses.replace(known, behind=behind)
                return
            if known is not None:
                self._drop(call_id)  # its kind changed (the machines did): it queues with its new kind
            self._waiters[call_id] = _Waiter(run_id, kind, order, behind)
            bisect.insort(self._queues.setdefault(kind, []), (order, call_id))

    def granted(self, call_id: str, wake_next: bool = True) -> list[Listener]:
        """The call was granted: who to wake now — the next of its kind, if it waited (and ``wake_next``: the
        books may name the next call themselves, when room is left for it)."""
        with self._lock:
            waiter = self._drop(call_id)
            if not wake_next or waiter is None or waiter.kind not in self._queues:
                return []
            return self._firsts([(waiter.kind, self._queues[waiter.kind])])

    def forgotten(self, call_id: str) -> None:
        """The call no longer waits (its run ended, or stopped scheduling)."""
        with self._lock:
            self._drop(call_id)

    def on_change(self, turn: bool = False, named: frozenset[str] | None = None) -> list[Listener]:
        """Who to wake when the books changed: listeners of every change, and the first of each kind (after a
        ``turn``, only a first that was refused behind another call).

        ``named``: the books said which calls may go (the installation's first of each kind): only those
        of them waiting here are woken, and calls whose kind is not known yet.
        """
        with self._lock:
            if named is None:
                return list(self._everything) + self._firsts(self._queues.items(), behind_only=turn)
            woken = list(self._everything) + self._firsts([(None, self._queues.get(None, []))])
            for call_id in named:
                waiter = self._waiters.get(call_id)
                if waiter is None or (turn and not waiter.behind):
                    continue  # not ours; or, after a turn, refused for what a turn does not free
                listener = self._runs.get(waiter.run_id)
                if listener is not None:
                    woken.append(listener)
            return list({id(listener): listener for listener in woken}.values())

    def _firsts(self, queues: Iterable[tuple[Kind | None, list[tuple[str, str]]]],
                behind_only: bool = False) -> list[Listener]:
        """The listener of the first waiting call of each kind's queue (of every call for ``None``), each once."""
        woken: dict[int, Listener] = {}
        for kind, queue in queues:
            for _order, call_id in queue:
                waiter = self._waiters[call_id]
                listener = self._runs.get(waiter.run_id)
                if listener is None:
                    continue  # its driver left: the next of its kind is the first
                if not behind_only or waiter.behind or kind is None:
                    woken[id(listener)] = listener
                if kind is not None:
                    break
        return list(woken.values())

    def _drop(self, call_id: str) -> _Waiter | None:
        waiter = self._waiters.pop(call_id, None)
        if waiter is not None:
            queue = self._queues[waiter.kind]
            queue.remove((waiter.order, call_id))
            if not queue:
                del self._queues[waiter.kind]
        return waiter
