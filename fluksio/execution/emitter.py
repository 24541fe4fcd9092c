"""What a node emits on its streaming ports while it runs: metric rows, and each message's last value."""

from __future__ import annotations

import math
from typing import Any

from fluksio.errors import NodeFailed
from fluksio.flows.node import NodeSpec
from fluksio.messages import NodeCall
from fluksio.runs.metrics import MetricSink
from fluksio.store.db import Database
from fluksio.store.metrics import delete_metrics


class Emitter:
    """The ``emit(name, value)`` a node is given, for one call.

    An element's numbers are series of their own (``loss[3]`` for element 3, so k folds give k curves); a
    retried or resumed call counts its steps from 0 again, so what an earlier attempt wrote goes first.
    ``streamed`` holds each message's last value JSON can carry (NaN and infinities are dropped).
    """

    def __init__(self, db: Database, node: NodeSpec, call: NodeCall) -> None:
        self.node = node
        self.sink = MetricSink(db, call.run_id)
        self.series = {name: name if call.index is None else f"{name}[{call.index}]" for name in node.streams}
        self.streamed: dict[str, Any] = {}
        if node.streams:
            delete_metrics(db, call.run_id, list(self.series.values()))

    def emit(self, name: str, value: Any) -> None:
        if name not in self.node.streams:
            declared = ", ".join(self.node.streams) or "nothing"
            raise NodeFailed(f"node {self.node.name!r} emitted {name!r}, but it streams only: {declared}")
        self.sink.record(self.series[name], value)
        if not (isinstance(value, float) and not math.isfinite(value)):
            self.streamed[name] = value

    def flush(self) -> None:
        self.sink.flush()
