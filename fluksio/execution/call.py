"""One node call: run the function with its inputs, capture its logs and outputs, report to the driver.

Whatever the node does — raise, return the wrong shape, return something that
is not JSON, run past its timeout — ends as an ``error`` completion for that
node. Nothing it does reaches the worker or the store as an exception.
"""

from __future__ import annotations

import logging
import math
import threading
import traceback
import uuid
from datetime import datetime, timezone
from typing import Any, Literal

from fluksio.artifacts.artifact import REF_KEY, Artifact, find_refs
from fluksio.errors import ArtifactError, MessageRefused, NodeFailed
from fluksio.execution import interrupt
from fluksio.execution.capture import capture_output
from fluksio.execution.isolated import run_in_child
from fluksio.execution.ran import Ran
from fluksio.execution.values import decode, encode
from fluksio.execution.warm import StartOnGpus
from fluksio.flows.flow import Flow
from fluksio.flows.node import NodeSpec
from fluksio.flows.source import short
from fluksio.messages import Completion, MadeArtifact, NodeCall
from fluksio.runs.metrics import MetricSink
from fluksio.runs.runtime import Runtime
from fluksio.store.metrics import delete_metrics

log = logging.getLogger(__name__)


def execute_call(runtime: Runtime, wire: Any, start_on_gpus: StartOnGpus = run_in_child) -> None:
    """Run the call the message ``wire`` describes (see :class:`~fluksio.messages.NodeCall`) and push its completion.

    Whatever happens, a call that reached this worker ends with its grant given back and a completion
    in its driver's inbox — else its run would wait for it forever. A message that is not a node call
    fluksio sends is refused before anything runs (there is nobody to report to). A call granted GPUs runs
    in a process of its own that sees only them: ``start_on_gpus`` starts it (a fresh interpreter, unless
    the worker has a fork server: fluksio/execution/warm.py).
    """
    try:
        call = NodeCall.from_wire(wire)
    except MessageRefused as exc:
        log.error("%s", exc)
        return
    grant = call.grant
    started = datetime.now(timezone.utc).isoformat()
    # First make sure this delivery is the one that may run the call: a copy that may not (see
    # Books.start) must not give back a grant, nor report an error, for the copy that does.
    if not runtime.placer.start(grant, uuid.uuid4().hex):
        log.warning("dropping call %s: it is running already, or settled, or its grant is void", call.call_id)
        return
    flow, refusal = _flow_for(runtime, call)
    if flow is None:
        _settle(runtime, call, started, status="error", error=refusal)
        return
    runtime.events.publish("node_started", run_id=call.run_id, node=call.unit, machine=grant.machine,
                           gpus=list(grant.gpus), attempt=call.attempt)
    try:
        node = flow.nodes.get(call.node)
        if node is None:
            raise NodeFailed(f"flow {call.flow!r} has no node {call.node!r} on this worker")
        if grant.gpus:
            ran = start_on_gpus(call, grant.gpus, node.timeout_s)
        else:
            ran = run_node_here(runtime, node, call)
        _settle(runtime, call, started, status="ok", outputs=ran.outputs, artifacts=ran.artifacts, logs=ran.logs)
    except NodeFailed as exc:
        _settle(runtime, call, started, status="error", error=str(exc), logs=exc.logs)
    except interrupt.CallCancelled:
        _settle(runtime, call, started, status="error", error="cancelled while running")
    except ArtifactError as exc:  # the store failed or timed out: this node's error (retried per its retries)
        _settle(runtime, call, started, status="error", error=str(exc))
    except Exception as exc:  # anything else fluksio itself got wrong must still end the call
        log.exception("node call %s failed inside fluksio", call.call_id)
        _settle(runtime, call, started, status="error",
                error=f"fluksio failed to run the node: {type(exc).__name__}: {exc}")


def _flow_for(runtime: Runtime, call: NodeCall) -> tuple[Flow | None, str]:
    """The flow the call may run here, or ``None`` and why it is refused."""
    machine = call.grant.machine
    if call.flow not in runtime.registry.names():
        # Never import what a message names: only flows this installation registered may run.
        log.error("refusing call %s: flow %r is not registered on this worker (registered: %s)", call.call_id,
                  call.flow, ", ".join(runtime.registry.names()) or "none")
        return None, (f"flow {call.flow!r} is not registered on machine {machine}; add its module or file to "
                      "FLUKSIO_FLOWS there")
    claimed = call.code_digest  # absent from an older driver's calls: those run as before
    flow = runtime.registry.get(call.flow) if claimed is None else runtime.registry.version(call.flow, claimed)
    if flow is None:
        # Running it would record this worker's code under the run's digest: a cache entry that a
        # later run of the other code would be handed.
        here = runtime.registry.digest(call.flow)
        log.error("refusing call %s of run %s: flow %r was loaded here as %s, the run was claimed with %s",
                  call.call_id, call.run_id, call.flow, here, claimed)
        return None, other_code(machine, call.flow, here, claimed or "")
    return flow, ""


def other_code(machine: str, flow: str, here: str, claimed: str) -> str:
    """Why a call was refused: ``machine`` loaded other code for ``flow`` than its run was claimed with."""
    return (f"machine {machine} loaded other code for flow {flow!r} than this run was claimed with "
            f"({short(here)} here, {short(claimed)} in the run's driver): its files changed since one of them "
            f"started; restart `fluksio worker` on {machine} (or the drivers) so that both load the same code")


def _settle(runtime: Runtime, call: NodeCall, started: str, *, status: Literal["ok", "error"],
            outputs: dict[str, Any] | None = None, artifacts: tuple[MadeArtifact, ...] = (), logs: str | None = None,
            error: str | None = None) -> None:
    """Give the call's resources back, then tell its driver how it ended (the one place a completion is made)."""
    grant = call.grant
    completion = Completion(
        call_id=call.call_id, node=call.node, index=call.index, attempt=call.attempt, status=status,
        machine=grant.machine,
        gpus=tuple(grant.gpus), started_at=started, finished_at=datetime.now(timezone.utc).isoformat(),
        epoch=call.epoch, outputs=outputs, artifacts=artifacts, logs=_storable(logs), error=_storable(error),
    )
    try:
        # Give the resources back before telling the driver, so its next claim can use them.
        runtime.placer.release(grant)
    finally:
        runtime.inbox.push(call.run_id, completion)


def _storable(text: str | None) -> str | None:
    """PostgreSQL's text cannot hold NUL characters."""
    return text.replace("\x00", "\\0") if text is not None else None


def run_node_here(runtime: Runtime, node: NodeSpec, call: NodeCall, use_timeout: bool = True) -> Ran:
    """Run the node in this process; returns its encoded outputs, the artifacts it made, and its logs."""
    store = runtime.artifacts
    # By name: a message that was skipped upstream is left out, and its parameter takes its default.
    kwargs = {param: decode(call.inputs[m], store) for param, m in zip(node.params or node.requires, node.requires)
              if m in call.inputs}
    sink = MetricSink(runtime.db, call.run_id)
    # An element's numbers are series of their own: `loss[3]` for element 3, so k folds give k curves.
    series = {name: name if call.index is None else f"{name}[{call.index}]" for name in node.streams}
    if node.streams:
        # A retried or resumed call counts its steps from 0 again: what an earlier attempt wrote goes.
        delete_metrics(runtime.db, call.run_id, list(series.values()))
    streamed: dict[str, Any] = {}

    def emit(name: str, value: Any) -> None:
        if name not in node.streams:
            declared = ", ".join(node.streams) or "nothing"
            raise NodeFailed(f"node {node.name!r} emitted {name!r}, but it streams only: {declared}")
        sink.record(series[name], value)
        if not (isinstance(value, float) and not math.isfinite(value)):
            # The message's value is the last emission JSON can carry; NaN and infinities are dropped.
            streamed[name] = value

    if node.takes_emit:
        kwargs["emit"] = emit
    limit = runtime.settings.log_limit_chars
    outcome: dict[str, Any] = {}

    def target() -> None:
        with capture_output(limit) as captured:
            interrupt.running(call.call_id)
            try:
                outcome["value"] = node.fn(**kwargs)
            except BaseException as exc:  # noqa: BLE001 - the node's failure is data, reported below
                outcome["error"] = exc
                captured.write(traceback.format_exc())
            finally:
                interrupt.finished(call.call_id)
                outcome["logs"] = captured.text

    if node.timeout_s is None or not use_timeout:
        target()
    else:
        # A thread cannot be killed; the call is reported as timed out and its grant is returned
        # while the abandoned thread finishes on its own.
        runner = threading.Thread(target=target, name=f"fluksio-node-{node.name}", daemon=True)
        runner.start()
        runner.join(node.timeout_s)
        if runner.is_alive():
            interrupt.interrupt(call.call_id)  # stop it at its next Python instruction
            raise NodeFailed(f"node {node.name!r} timed out after {node.timeout_s:g} s", logs=outcome.get("logs"))
    logs = outcome.get("logs", "")
    try:
        sink.flush()
        if "error" in outcome:
            raise NodeFailed(_describe(outcome["error"]))
        outputs = _shape_outputs(node, outcome.get("value"))
        made: list[Artifact] = []
        encoded = {m: encode(v, store, made, f"message {m!r} of node {node.name!r}") for m, v in outputs.items()}
        for message in node.streams:
            encoded[message] = encode(streamed.get(message), store, made,
                                      f"streamed message {message!r} of node {node.name!r}")
    except NodeFailed as failure:
        failure.logs = logs
        raise
    except ArtifactError as exc:
        # Storing an output failed (the store is unreachable, timed out, refused it): this node failed, and
        # its retries decide what happens next, never the driver.
        raise NodeFailed(f"node {node.name!r} could not store its outputs: {exc}", logs=logs) from None
    artifacts = tuple(
        MadeArtifact(message=m, digest=body["digest"], size=body["size"],
                     media_type=body.get("media_type") or "application/octet-stream", name=body.get("name"),
                     codec=body.get("codec"))
        for m, value in encoded.items() for body in (ref[REF_KEY] for ref in find_refs(value))
    )
    return Ran(encoded, artifacts, logs)


def _shape_outputs(node: NodeSpec, value: Any) -> dict[str, Any]:
    if not node.provides:
        return {}
    if len(node.provides) == 1:
        return {node.provides[0]: value}
    if not isinstance(value, dict):
        raise NodeFailed(
            f"node {node.name!r} provides {', '.join(node.provides)} and must return a dict of them, "
            f"got {type(value).__name__}"
        )
    missing = [m for m in node.provides if m not in value]
    extra = [k for k in value if k not in node.provides]
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(map(repr, missing))}")
        if extra:
            problems.append(f"undeclared {', '.join(map(repr, extra))}")
        raise NodeFailed(f"node {node.name!r} returned a dict with {' and '.join(problems)}")
    return dict(value)


def _describe(exc: BaseException) -> str:
    """``ValueError: boom (at train.py:12 in fit)``: the error and the innermost frame that raised it."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"
