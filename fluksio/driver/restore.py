"""What a resumed run keeps from its earlier drives. Pure: it reads rows, it writes nothing.

A node whose latest row ended ``ok`` or ``cached`` is restored from that row (its
outputs go into the walk, it does not run again), provided the inputs it had are
there again; every other node runs again, its attempts counting on from the last.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from fluksio.driver.walk import NodeState, Walk
from fluksio.schemas import NodeStatus


class EarlierRow(Protocol):
    """What restoring reads of a node row (a stored ``RunNode`` has these columns)."""

    node: str
    attempt: int
    status: str
    outputs: dict[str, Any] | None


def restore_earlier(walk: Walk, rows: Iterable[EarlierRow]) -> dict[str, int]:
    """Complete in ``walk`` the nodes that succeeded before; returns the attempt each other node goes on from.

    Rows of nodes the flow no longer has are ignored (the flow may have changed since the run began).
    """
    latest: dict[str, EarlierRow] = {}
    for row in rows:
        if row.node in walk.flow.nodes and (row.node not in latest or row.attempt >= latest[row.node].attempt):
            latest[row.node] = row
    next_attempt: dict[str, int] = {}
    for node in walk.flow.order:  # upstream first: a node's inputs are restored before it is looked at
        row = latest.get(node)
        if row is None:
            continue
        inputs_there = walk.missing[node] == 0 and walk.state[node] is NodeState.PENDING
        if row.status in (NodeStatus.OK.value, NodeStatus.CACHED.value) and inputs_there:
            walk.start(node)
            walk.complete(node, row.outputs or {})
        else:
            next_attempt[node] = row.attempt + 1
    return next_attempt
