"""What a node emits while it runs: metric rows, and each emitted message's last value."""

from __future__ import annotations

import math
import re
from typing import Any

from fluksio.constants import MAX_NAME_LENGTH
from fluksio.errors import MetricRefused
from fluksio.flows.node import NodeSpec
from fluksio.messages import NodeCall
from fluksio.runs.metrics import MetricSink, is_metric
from fluksio.store.db import Database
from fluksio.store.metrics import delete_metrics

#: A metric's name, when the node does not declare it in ``streams=``: a letter or ``_`` first, then letters,
#: digits and ``_ . - /`` (``val_loss``, ``train/loss``); ``[`` is kept for an element's index (``loss[3]``).
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")


class Emitter:
    """The ``emit(name, value)`` a node is given, for one call.

    A name the node declares in ``streams=`` is a streaming message: any value JSON carries, its last one a
    message the next nodes may read, its numbers (finite ones) a metric series. Any other name is a metric
    alone: its value must be a finite number, or the call of ``emit`` raises :class:`MetricRefused` at the
    node's own line. An undeclared metric's last value is kept with the node's outputs (:meth:`outputs`), so
    that a node restored from the cache brings its series along as a declared stream's does.

    An element's numbers are series of their own (``loss[3]`` for element 3, so k folds give k curves); a
    retried or resumed call counts its steps from 0 again, so what an earlier attempt wrote goes first.
    ``streamed`` holds each declared message's last value JSON can carry (NaN and infinities are dropped).
    """

    def __init__(self, db: Database, node: NodeSpec, call: NodeCall) -> None:
        self.node = node
        self.db = db
        self.run_id = call.run_id
        self.index = call.index
        #: Whether an earlier attempt of this call may have written points (attempts count over the run's life).
        self.again = call.attempt > 1 or call.epoch > 0
        self.sink = MetricSink(db, call.run_id)
        self.series = {name: self._series_of(name) for name in node.streams}
        self.streamed: dict[str, Any] = {}
        #: Each undeclared metric's last value, by name.
        self.metrics: dict[str, float] = {}
        if node.streams:
            delete_metrics(db, call.run_id, list(self.series.values()))

    def _series_of(self, name: str) -> str:
        return name if self.index is None else f"{name}[{self.index}]"

    def emit(self, name: str, value: Any) -> None:
        series = self.series.get(name) if isinstance(name, str) else None
        if series is None:
            series = self._new_metric(name)
        if name in self.node.streams:
            self.sink.record(series, value)
            if not (isinstance(value, float) and not math.isfinite(value)):
                self.streamed[name] = value
            return
        if not is_metric(value):
            raise MetricRefused(f"emit({name!r}, {value!r:.60}): a metric is a finite number, got "
                                f"{_what(value)}; emit a number (float(x)), or declare {name!r} in the node's "
                                "streams=[...] to send other values as a message")
        self.sink.record(series, value)
        self.metrics[name] = float(value)

    def _new_metric(self, name: str) -> str:
        """The series of a name the node does not declare, checked, and emptied of what an earlier attempt of
        this call wrote (a first attempt has none to empty: no statement spent on it)."""
        where = f"node {self.node.name!r}"
        if not isinstance(name, str):
            raise MetricRefused(f"emit({name!r}, …): a metric's name is a string such as 'loss', got "
                                f"{type(name).__name__}")
        if not METRIC_NAME.fullmatch(name):
            raise MetricRefused(f"emit({name!r}, …): {name!r} is not a metric name; use letters, digits and "
                                "'_', '.', '-', '/', starting with a letter or '_' (e.g. 'val_loss', 'train/loss')")
        if name in self.node.provides or name in self.node.requires:
            raise MetricRefused(f"emit({name!r}, …): {name!r} is a message of {where}; give the metric a name "
                                "of its own")
        series = self._series_of(name)
        if len(series) > MAX_NAME_LENGTH:
            raise MetricRefused(f"emit({name[:40]!r}…, …): a metric's name is at most {MAX_NAME_LENGTH} characters "
                                f"(its element's index included), got {len(series)}")
        if self.again:
            delete_metrics(self.db, self.run_id, [series])
        self.series[name] = series
        return series

    def outputs(self) -> dict[str, Any]:
        """What the node's outputs keep of its emissions: each declared stream's last value (``None``: it emitted
        none), and each undeclared metric's."""
        return {**{name: self.streamed.get(name) for name in self.node.streams}, **self.metrics}

    def flush(self) -> None:
        self.sink.flush()


def _what(value: Any) -> str:
    if isinstance(value, float):
        return f"{value!r} (not finite)"
    return f"a {type(value).__module__}.{type(value).__qualname__}" if type(value).__module__ != "builtins" \
        else f"a {type(value).__name__}"
