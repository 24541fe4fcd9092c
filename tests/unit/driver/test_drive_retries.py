"""Retries that learn from the failure: retry_on, backoff in the driver's schedule (holding no grant), and
more RAM after running out of memory — driven through ``drive()`` with a stand-in worker that answers each
call as the test says."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from typing import Any

import pytest

from fluksio import Flow, Resources
from fluksio.driver.retrying import backoff_s, matches
from fluksio.flows.node import error_types
from fluksio.messages import Completion, NodeCall
from fluksio.runtime import Runtime
from fluksio.store.run_rows import get_run, load_record
from tests.unit.driver.drives import answer_call, drive_with


def scripted(runtime: Runtime, outcomes: list[dict[str, Any]], calls: list[NodeCall]):  # noqa: ANN201
    """A dispatch that answers the n-th call with ``outcomes[n]`` (keyword arguments of ``answer_call``)."""
    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        calls.append(call)
        answer_call(runtime, call, **outcomes[len(calls) - 1])
    return dispatch


def one_node(**options: Any) -> Flow:
    flow = Flow("retried", outputs=["x"])
    flow.node(lambda: 1, name="solve", provides="x", requires=[], **options)
    return flow


# -- retry_on -----------------------------------------------------------------------------------------------


def test_retry_on_retries_the_failures_it_names(make_runtime):
    runtime = make_runtime(cpus=2)
    calls: list[NodeCall] = []
    flow = one_node(retries=3, retry_on=(TimeoutError, "ConnectionError"))
    run_id = drive_with(runtime, flow, scripted(runtime, [
        {"error": TimeoutError("slow")}, {"error": ConnectionRefusedError("refused")}, {}], calls))
    assert get_run(runtime.db, run_id).status == "ok"
    assert [c.attempt for c in calls] == [1, 2, 3]  # ConnectionRefusedError is a ConnectionError


def test_retry_on_fails_other_errors_at_once_saying_why(make_runtime):
    runtime = make_runtime(cpus=2)
    calls: list[NodeCall] = []
    run_id = drive_with(runtime, one_node(retries=3, retry_on=(TimeoutError,)),
                        scripted(runtime, [{"error": ValueError("bad input")}], calls))
    record = load_record(runtime.db, run_id)
    assert record.status.value == "error" and len(calls) == 1
    [row] = record.nodes
    assert row.error == "ValueError: bad input"
    assert row.logs.startswith("[fluksio] not retried: ValueError is not among retry_on (TimeoutError)")


def test_a_failure_around_the_node_is_retried_whatever_retry_on_says(make_runtime):
    runtime = make_runtime(cpus=2)
    calls: list[NodeCall] = []
    run_id = drive_with(runtime, one_node(retries=1, retry_on=(TimeoutError,)),
                        scripted(runtime, [{"lost": True}, {}], calls))
    assert get_run(runtime.db, run_id).status == "ok" and len(calls) == 2


def test_names_match_a_class_or_any_of_its_bases_by_name_or_full_name():
    types = error_types(ConnectionRefusedError())
    assert matches(("ConnectionError",), types) and matches(("OSError",), types)
    assert not matches(("TimeoutError",), types)
    assert matches(("fluksio.errors.FlowError",), ("fluksio.errors.FlowError", "fluksio.errors.FluksioError"))
    assert matches(("FluksioError",), ("fluksio.errors.FlowError", "fluksio.errors.FluksioError"))
    assert not matches(("Error",), ("fluksio.errors.FlowError",))


# -- backoff --------------------------------------------------------------------------------------------------


def test_backoff_doubles_per_retry_within_a_quarter_either_way_and_is_capped():
    spec = one_node(retries=9, retry_backoff_s=2.0, retry_backoff_max_s=20).nodes["solve"]
    assert [backoff_s(spec, k, lambda: 0.5) for k in (1, 2, 3, 4, 5)] == [2.0, 4.0, 8.0, 16.0, 20.0]
    assert backoff_s(spec, 1, lambda: 0.0) == 1.5 and backoff_s(spec, 2, lambda: 0.999999) == pytest.approx(5.0)
    assert backoff_s(spec, 2000, lambda: 0.5) == 20.0  # no overflow, however many retries
    assert backoff_s(one_node(retries=2).nodes["solve"], 1) == 0.0


def test_a_retry_backs_off_in_the_driver_holding_no_grant_while_another_call_uses_the_cpu(make_runtime):
    runtime = make_runtime(cpus=1)
    flow = Flow("backoff", outputs=["x", "y"])
    flow.node(lambda: 1, name="flaky", provides="x", requires=[], retries=1, retry_backoff_s=0.4,
              retry_backoff_max_s=0.4)
    flow.node(lambda: 1, name="other", provides="y", requires=[])
    sent: list[tuple[str, int, float]] = []
    busy_while_waiting: list[int] = []

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        sent.append((call.node, call.attempt, time.monotonic()))
        if call.node == "other":  # runs while flaky waits out its backoff: the only cpu is free for it
            busy_while_waiting.append(runtime.placer.snapshot()["machines"][0]["calls"])
        answer_call(runtime, call, error=TimeoutError("slow") if (call.node, call.attempt) == ("flaky", 1) else None)

    run_id = drive_with(runtime, flow, dispatch)
    assert get_run(runtime.db, run_id).status == "ok"
    assert [(node, attempt) for node, attempt, _ in sent] == [("flaky", 1), ("other", 1), ("flaky", 2)]
    waited = sent[2][2] - sent[0][2]
    assert 0.4 * 0.75 <= waited < 0.4 * 1.25 + 0.5, waited  # as asked (the cap is 0.4 s), give or take a moment
    assert busy_while_waiting == [1]  # other's own grant: flaky held none while it waited
    [failed] = [n for n in load_record(runtime.db, run_id).nodes if n.node == "flaky" and n.attempt == 1]
    assert re.match(r"\[fluksio\] retried as attempt 2 of 2, after 0\.[34] s\n", failed.logs), failed.logs


# -- out of memory -------------------------------------------------------------------------------------------


def test_running_out_of_memory_retries_with_more_ram_up_to_the_largest_machine(make_runtime):
    runtime = make_runtime(cpus=2, ram_mb=10_000)
    calls: list[NodeCall] = []
    flow = one_node(resources=Resources(ram_mb=3000), retries=3, escalate_ram=2.0, retry_on=(TimeoutError,))
    run_id = drive_with(runtime, flow, scripted(runtime, [
        {"error": MemoryError(), "oom": True}, {"lost": True, "oom": True}, {"error": MemoryError(), "oom": True},
        {}], calls))
    assert get_run(runtime.db, run_id).status == "ok"
    assert [c.grant.ram_mb for c in calls] == [3000, 6000, 10_000, 10_000]  # 12000 and 24000 clamped to fit
    rows = sorted(load_record(runtime.db, run_id).nodes, key=lambda n: n.attempt)
    assert [n.granted.ram_mb for n in rows] == [3000, 6000, 10_000, 10_000]
    assert "out of memory with 3000 MB RAM: it asks for 6000 MB" in rows[0].logs
    assert "clamped: requested 1 cpu(s) and 12000 MB RAM" in rows[2].logs


def test_a_retry_that_did_not_run_out_of_memory_asks_for_the_same(make_runtime):
    runtime = make_runtime(cpus=2, ram_mb=10_000)
    calls: list[NodeCall] = []
    flow = one_node(resources=Resources(ram_mb=3000), retries=2, escalate_ram=2.0)
    drive_with(runtime, flow, scripted(runtime, [{"error": ValueError("no")}, {}], calls))
    assert [c.grant.ram_mb for c in calls] == [3000, 3000]


def test_a_cancel_while_a_retry_backs_off_cancels_it_at_once(make_runtime):
    from fluksio.messages import Cancel
    from fluksio.store.run_rows import request_cancel

    runtime = make_runtime(cpus=1)
    calls: list[NodeCall] = []

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        calls.append(call)
        answer_call(runtime, call, error=TimeoutError("slow"))
        # As client.cancel does it (a Cancel message counts only for a run whose row asks for it), read after
        # the completion: the retry waits out 60 s.
        request_cancel(runtime.db, call.run_id, "stop")
        runtime.inbox.push(call.run_id, Cancel())

    started = time.monotonic()
    run_id = drive_with(runtime, one_node(retries=2, retry_backoff_s=60, retry_backoff_max_s=60), dispatch)
    assert time.monotonic() - started < 10  # not the minute the retry would have waited
    record = load_record(runtime.db, run_id)
    assert record.status.value == "cancelled" and len(calls) == 1
    assert [(n.attempt, n.status.value, n.error) for n in sorted(record.nodes, key=lambda n: n.attempt)] == [
        (1, "error", "TimeoutError: slow"), (2, "cancelled", "cancelled while waiting to be retried")]


# -- mapped nodes -------------------------------------------------------------------------------------------


def test_each_element_of_a_mapped_node_is_retried_alone_and_shown_as_flow_node_index(make_runtime):
    from fluksio.driver.drive import drive
    from fluksio.runs.submit import submit_run

    runtime = make_runtime(cpus=1)
    flow = Flow("mapped_retries", inputs={"items": list[int]}, outputs=["xs"])
    flow.node(lambda item: item, name="double", provides="xs", map={"item": "items"}, retries=1)
    calls: list[tuple[str, int | None, int]] = []

    def dispatch(call: NodeCall, _queue: str, display: str) -> None:
        calls.append((display, call.index, call.attempt))
        failed = call.index == 1 and call.attempt == 1  # the second element fails once
        runtime.placer.release(call.grant)
        now = datetime.now(timezone.utc).isoformat()
        runtime.inbox.push(call.run_id, Completion(
            call_id=call.call_id, node=call.node, index=call.index, attempt=call.attempt,
            status="error" if failed else "ok", error="ValueError: once" if failed else None,
            error_types=error_types(ValueError()) if failed else (), machine=call.grant.machine,
            started_at=now, finished_at=now, outputs=None if failed else {"xs": 2 * call.inputs["items"]}, logs=""))

    run, _ = submit_run(runtime.db, runtime.registry, runtime.artifacts, flow, engine="embedded",
                        params={"items": [10, 20, 30]}, no_cache=True, embedded_machines=runtime.placer.machines())
    drive(runtime, run.id, dispatch, lambda _call_id: None)
    record = load_record(runtime.db, run.id)
    assert record.status.value == "ok" and record.result == {"xs": [20, 40, 60]}
    assert sorted(calls, key=lambda c: (c[1], c[2])) == [
        ("mapped_retries.double[0]", 0, 1), ("mapped_retries.double[1]", 1, 1), ("mapped_retries.double[1]", 1, 2),
        ("mapped_retries.double[2]", 2, 1)]  # Flower's name for each element; only the failed one ran again
