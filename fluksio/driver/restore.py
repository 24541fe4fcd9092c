"""What a resumed run keeps from its earlier drives. Pure: it reads rows, it writes nothing.

A unit (a node, or one element of a mapped node) whose latest row ended ``ok``
or ``cached`` is restored from that row (its outputs go into the walk, it does
not run again), provided the inputs it had are there again; every other unit
runs again, its attempts counting on from the last.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Any, Protocol

from fluksio.driver.walk import Walk
from fluksio.schemas import NodeStatus, unit_of


class EarlierRow(Protocol):
    """What restoring reads of a node row (a stored ``RunNode`` has these columns)."""

    node: str
    element: int
    attempt: int
    status: str
    outputs: dict[str, Any] | None


def restore_earlier(walk: Walk, rows: Iterable[EarlierRow], running: Container[str] = ()) -> dict[str, int]:
    """Complete in ``walk`` the units that succeeded before; returns the attempt each other unit goes on from.

    Rows of nodes the flow no longer has are ignored (the flow may have changed since the run began).
    Units left to run stay fresh in the walk, for the driver to take; those ``running`` (calls of an earlier
    drive, still running: fluksio/driver/inherited.py) are started in it instead, for the driver to adopt.
    """
    latest: dict[str, EarlierRow] = {}
    for row in rows:
        if row.node not in walk.flow.nodes:
            continue
        unit = unit_of(row.node, row.element if row.element is not None and row.element >= 0 else None)
        earlier = latest.get(unit)
        if earlier is None or row.attempt >= earlier.attempt:
            latest[unit] = row
    # Every unit with a row goes on counting from it, whether it runs again now or later (a unit whose
    # inputs are made again first): a new row never takes the (node, element, attempt) of an old one.
    next_attempt = {unit: row.attempt + 1 for unit, row in latest.items()}
    again: list[str] = []
    # Upstream first: a unit becomes fresh only once its inputs are there (restored, or given).
    while fresh := walk.take_fresh():
        for unit in fresh:
            found = latest.get(unit)
            if found is not None and found.status in (NodeStatus.OK.value, NodeStatus.CACHED.value):
                walk.start(unit)
                walk.complete(unit, found.outputs or {})
                del next_attempt[unit]
                continue
            if unit in running:
                walk.start(unit)
                continue
            again.append(unit)
    for unit in again:
        walk.retry(unit)  # fresh again, for the driver
    return next_attempt
