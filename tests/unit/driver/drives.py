"""What the driver's tests share: driving a run through ``drive()`` on a SQLite store with a stand-in worker
(each dispatched call is answered as the test says), and the small flows they drive."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from fluksio import Flow
from fluksio.driver.drive import drive
from fluksio.flows.node import error_types
from fluksio.messages import Completion, NodeCall
from fluksio.runs.submit import submit_run
from fluksio.runtime import Runtime


def answer(runtime: Runtime, flow: Flow, call: NodeCall, ok: bool = True) -> None:
    """What a worker does when the call ends: give the grant back, tell the driver."""
    grant = call.grant
    runtime.placer.release(grant)
    now = datetime.now(timezone.utc).isoformat()
    runtime.inbox.push(call.run_id, Completion(
        call_id=call.call_id, node=call.node, attempt=call.attempt,
        status="ok" if ok else "error", error=None if ok else "ValueError: no",
        machine=grant.machine, gpus=(), started_at=now, finished_at=now,
        outputs={m: 0 for m in flow.nodes[call.node].provides} if ok else None, logs="",
    ))


def answer_call(runtime: Runtime, call: NodeCall, error: BaseException | None = None, oom: bool = False,
                lost: bool = False) -> None:
    """What a worker does as a call ends: give the grant back, tell the driver (``error``: how it failed;
    ``lost``: a failure around the node, which carries no exception of the node's). A call that ends well
    gives output ``x``, its attempt."""
    runtime.placer.release(call.grant)
    now = datetime.now(timezone.utc).isoformat()
    failed = error is not None or lost
    runtime.inbox.push(call.run_id, Completion(
        call_id=call.call_id, node=call.node, attempt=call.attempt, status="error" if failed else "ok",
        error=(f"{type(error).__name__}: {error}" if error else "machine m was lost") if failed else None,
        error_types=error_types(error) if error is not None else (), oom=oom, machine=call.grant.machine,
        started_at=now, finished_at=now, outputs=None if failed else {"x": call.attempt}, logs="",
    ))


def drive_with(runtime: Runtime, flow: Flow, dispatch: Any) -> str:
    run, _ = submit_run(runtime.db, runtime.registry, runtime.artifacts, flow, engine="embedded", params={},
                        no_cache=True, embedded_machines=runtime.placer.machines())
    drive(runtime, run.id, dispatch, lambda _call_id: None)
    return run.id


def drive_instantly(runtime: Runtime, flow: Flow, failing: frozenset[str] = frozenset()) -> str:
    """Drive the flow with a worker that answers every call the moment it is sent."""
    return drive_with(runtime, flow, lambda call, _queue, _display: answer(
        runtime, flow, call, ok=call.node not in failing))


def hop(previous: int | None = None) -> int:
    return 0


def chain(length: int) -> Flow:
    flow = Flow(f"chain_{length}", outputs=[f"m{length - 1}"])
    for i in range(length):
        flow.node(hop, name=f"n{i}", provides=f"m{i}", requires=[f"m{i - 1}"] if i else [])
    return flow
