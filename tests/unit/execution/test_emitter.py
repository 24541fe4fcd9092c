"""``emit`` in a node call: any name is a metric, a declared one is also a message; what cannot be a metric is
refused at the node's own line, which the call's error and logs point at (not fluksio's emitter)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from fluksio import Flow, Settings
from fluksio.execution.call import execute_call
from fluksio.messages import Completion
from fluksio.placement.placer import Request
from fluksio.runtime import Runtime
from fluksio.schemas import Inventory, Resources
from fluksio.store.metrics import read_metrics
from tests.unit.store.runs import new_run


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    made = Runtime.standalone(Settings(database_url=f"sqlite:///{tmp_path / 'db'}", artifacts_dir=tmp_path / "a"))
    made.db.upgrade()
    made.placer.attach(Inventory(name="m", cpus=1))
    return made


def call(runtime: Runtime, flow: Flow, node: str, attempt: int = 1, index: int | None = None,
         inputs: dict | None = None) -> tuple[str, Completion]:
    """Run one call of ``node`` in a run of its own (or the run of an earlier call); its run's id and completion."""
    runtime.registry.register(flow)
    run_id = getattr(runtime, "_test_run", None) or new_run(runtime.db, flow=flow.name).id
    runtime._test_run = run_id  # type: ignore[attr-defined]
    call_id = f"{run_id}.{node}.{attempt}"
    grant = runtime.placer.try_claim(Request(call_id, Resources(cpus=1)))
    execute_call(runtime, {"call_id": call_id, "run_id": run_id, "flow": flow.name, "node": node, "attempt": attempt,
                           "inputs": inputs or {}, "grant": grant.model_dump(mode="json"), "index": index})
    completion = runtime.inbox.pop(run_id, timeout=1)
    assert completion is not None
    return run_id, completion


def line_of(fn, text: str) -> int:
    """The line of ``fn``'s source that holds ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_a_name_the_node_never_declared_becomes_a_series_and_its_last_value_is_kept(runtime: Runtime) -> None:
    flow = Flow("undeclared")

    @flow.node(provides="done", streams=["loss"])
    def train(emit):
        for step in range(3):
            emit("loss", 1.0 / (step + 1))
            emit("val/acc", 0.5 + step / 10)  # never declared
        emit("epochs_run", 3)
        return True

    run_id, completion = call(runtime, flow, "train")
    assert completion.status == "ok", completion.error
    assert read_metrics(runtime.db, run_id) == {
        "epochs_run": [(0, 3.0)], "loss": [(0, 1.0), (1, 0.5), (2, 1 / 3)],
        "val/acc": [(0, 0.5), (1, 0.6), (2, 0.7)]}
    # Kept with the outputs (a node restored from the cache brings its series along), but only the declared
    # stream is a message other nodes may read.
    assert completion.outputs == {"done": True, "loss": 1 / 3, "val/acc": 0.7, "epochs_run": 3.0}
    assert flow.nodes["train"].messages == ("done", "loss")


def test_an_element_s_undeclared_metric_is_its_own_series(runtime: Runtime) -> None:
    flow = Flow("elements", inputs={"xs": list})

    @flow.node(provides="ys", map={"x": "xs"})
    def square(x, emit):
        emit("seen", x)
        return x * x

    run_id, completion = call(runtime, flow, "square", index=2, inputs={"xs": 7})
    assert completion.status == "ok", completion.error
    assert read_metrics(runtime.db, run_id) == {"seen[2]": [(0, 7.0)]}


def test_a_retried_call_replaces_what_its_earlier_attempt_wrote(runtime: Runtime) -> None:
    flow = Flow("retried", inputs={"n": int})

    @flow.node(provides="done")
    def train(n, emit):
        for step in range(n):
            emit("acc", float(step))
        return True

    run_id, first = call(runtime, flow, "train", inputs={"n": 3})
    _, second = call(runtime, flow, "train", attempt=2, inputs={"n": 1})
    assert first.status == second.status == "ok"
    assert read_metrics(runtime.db, run_id) == {"acc": [(0, 0.0)]}


@pytest.mark.parametrize("value, said", [
    (float("nan"), "emit('acc', nan): a metric is a finite number, got nan (not finite); emit a number"),
    ("high", "emit('acc', 'high'): a metric is a finite number, got a str; emit a number (float(x)), or declare "
             "'acc' in the node's streams=[...] to send other values as a message"),
    (True, "emit('acc', True): a metric is a finite number, got a bool"),
    (None, "emit('acc', None): a metric is a finite number, got a NoneType"),
])
def test_a_value_that_is_no_metric_is_refused_at_the_node_s_own_line(runtime: Runtime, value, said) -> None:
    flow = Flow("refused")

    @flow.node(provides="done")
    def evaluate(emit):
        emit("acc", 0.9)
        emit("acc", value)  # the line the failure names
        return True

    _, completion = call(runtime, flow, "evaluate")
    assert completion.status == "error"
    line = line_of(evaluate, "the line the failure names")
    here = f"(at {__file__}:{line} in evaluate)"
    assert completion.error == f"MetricRefused: {said}" + completion.error.partition(said)[2]
    assert completion.error.endswith(here), completion.error
    # The traceback in the logs ends at that line too: nothing of fluksio's emitter below it.
    traceback = completion.logs.rstrip().splitlines()
    assert traceback[-1].startswith("fluksio.errors.MetricRefused: emit('acc'")
    frames = [text for text in traceback if text.startswith("  File ")]
    assert frames[-1] == f'  File "{__file__}", line {line}, in evaluate'
    assert "fluksio/execution/emitter.py" not in completion.logs
    assert {"fluksio.errors.MetricRefused", "ValueError"} <= set(completion.error_types)  # retry_on=(ValueError,)


@pytest.mark.parametrize("name, said", [
    ("val acc", "emit('val acc', …): 'val acc' is not a metric name; use letters, digits and '_', '.', '-', '/'"),
    ("loss[1]", "emit('loss[1]', …): 'loss[1]' is not a metric name"),
    (3, "emit(3, …): a metric's name is a string such as 'loss', got int"),
    ("done", "emit('done', …): 'done' is a message of node 'evaluate'; give the metric a name of its own"),
    ("x" * 201, "a metric's name is at most 200 characters (its element's index included), got 201"),
])
def test_a_name_that_cannot_be_a_metric_is_refused_saying_why(runtime: Runtime, name, said) -> None:
    flow = Flow("names")

    @flow.node(provides="done")
    def evaluate(emit):
        emit(name, 1.0)
        return True

    _, completion = call(runtime, flow, "evaluate")
    assert completion.status == "error" and said in completion.error, completion.error
    assert completion.error.endswith(f"(at {__file__}:{line_of(evaluate, 'emit(name, 1.0)')} in evaluate)")


def test_a_declared_stream_still_carries_any_value_as_a_message(runtime: Runtime) -> None:
    flow = Flow("declared")

    @flow.node(provides="done", streams=["note", "loss"])
    def train(emit):
        emit("note", "warming up")
        emit("loss", float("nan"))  # not a point of the series, and no error: a declared message takes it
        emit("loss", 0.5)
        return True

    run_id, completion = call(runtime, flow, "train")
    assert completion.status == "ok", completion.error
    assert completion.outputs == {"done": True, "note": "warming up", "loss": 0.5}
    assert read_metrics(runtime.db, run_id) == {"loss": [(0, 0.5)]}


def test_an_error_of_the_node_s_own_still_names_its_innermost_line(runtime: Runtime) -> None:
    flow = Flow("bug")

    def helper():
        raise KeyError("deep")

    @flow.node(provides="done")
    def step():
        return helper()

    _, completion = call(runtime, flow, "step")
    assert completion.error.endswith(f"(at {__file__}:{line_of(helper, 'raise KeyError')} in helper)")
