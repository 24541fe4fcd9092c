"""The calls a driver sent and has not heard the end of, and how it notices those that will never report.

A call whose machine died (or restarted) is lost. A call whose grant its
worker gave back, yet whose completion has not come by the next check either,
may have reported into a message that went astray: the driver looks for it
among what waits on the inbox (behind other messages, on a busy driver) and
what the inbox handed out lately. It gives up on it only once the grant has
been given back for a heartbeat's lifetime: a worker that has not pushed its
completion by then (it pushes right after giving back) is taken for gone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from fluksio.placement.placer import Placer
from fluksio.schemas import Grant


@dataclass(frozen=True, slots=True)
class Sent:
    """A call in flight: its unit (a node, or ``node[i]``) and the grant it holds."""

    unit: str
    grant: Grant


class CallsInFlight:
    """Call id → :class:`Sent`, for every call dispatched and not yet settled.

    Invariant: a call is here from the moment it is sent until its completion is handled (or it is
    settled without one: lost, cancelled, stopped); its grant is held all that time.
    """

    def __init__(self) -> None:
        self._calls: dict[str, Sent] = {}
        #: Calls whose grant was found given back at the last check, their completions not yet come, and
        #: when (``time.monotonic()``) it was first found given back.
        self._given_back: dict[str, float] = {}

    def add(self, call_id: str, unit: str, grant: Grant) -> None:
        self._calls[call_id] = Sent(unit, grant)

    def pop(self, call_id: str) -> Sent | None:
        return self._calls.pop(call_id, None)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._calls

    def __len__(self) -> int:
        return len(self._calls)

    def items(self) -> list[tuple[str, Sent]]:
        """A copy: settling a call while going through them is allowed."""
        return list(self._calls.items())

    def take_all(self) -> list[tuple[str, Sent]]:
        """Every call in flight, forgotten here (the caller stops them)."""
        calls = list(self._calls.items())
        self._calls.clear()
        return calls

    def given_back(self, placer: Placer) -> tuple[set[str], bool]:
        """The calls whose grants are no longer held, and whether some of them were already at the last check
        (their completions are overdue: worth looking for among what the inbox handed out)."""
        found = placer.given_back([sent.grant for sent in self._calls.values()])
        return found, not found.isdisjoint(self._given_back)

    def lost_machines(self, placer: Placer) -> set[tuple[str, str | None]]:
        """``(machine, incarnation)`` of the calls in flight whose machine is gone (or started again)."""
        looked: dict[tuple[str, str | None], bool] = {}  # one look per machine (and start of it), not per call
        for sent in self._calls.values():
            machine = (sent.grant.machine, sent.grant.incarnation)
            if machine not in looked:
                looked[machine] = placer.lost(sent.grant)
        return {machine for machine, lost in looked.items() if lost}

    def unreported(self, given_back: set[str], lost: set[tuple[str, str | None]], now: float,
                   grace_s: float) -> Iterator[tuple[str, Sent, bool]]:
        """``(call id, sent, lost)`` for each call that will never report: its machine is among ``lost``, or
        its grant was given back at this check and at one ``grace_s`` or more before (a check before, at the
        least), with no completion coming."""
        for call_id, sent in self.items():
            if (sent.grant.machine, sent.grant.incarnation) in lost:
                yield call_id, sent, True
            elif call_id in given_back and now - self._given_back.get(call_id, now) >= grace_s:
                yield call_id, sent, False

    def remember_given_back(self, given_back: set[str], now: float) -> None:
        """Keep, for the next check, which calls still in flight had their grant given back at this one (and
        since when)."""
        self._given_back = {call_id: self._given_back.get(call_id, now) for call_id in given_back
                            if call_id in self._calls}

    def grants(self) -> Sequence[Grant]:
        return [sent.grant for sent in self._calls.values()]
