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
from typing import Any

from fluksio.artifacts.artifact import Artifact, find_refs
from fluksio.errors import ArtifactError, NodeFailed
from fluksio.execution import interrupt
from fluksio.execution.capture import capture_output
from fluksio.execution.isolated import run_in_child
from fluksio.execution.values import decode, encode
from fluksio.flows.node import NodeSpec
from fluksio.flows.source import short
from fluksio.runs.inbox import DONE
from fluksio.runs.metrics import MetricSink
from fluksio.runs.runtime import Runtime
from fluksio.schemas import Grant
from fluksio.store.metrics import delete_metrics

log = logging.getLogger(__name__)


def execute_call(runtime: Runtime, call: dict[str, Any]) -> None:
    """Run the call described by ``call`` (see the driver's dispatch) and push its completion.

    Whatever happens, a call that reached this worker ends with its grant given back and a completion
    in its driver's inbox — else its run would wait for it forever.
    """
    try:
        grant = Grant.model_validate(call["grant"])
        call_id, run_id, flow_name = str(call["call_id"]), str(call["run_id"]), str(call["flow"])
        call["node"], call["attempt"], call["inputs"]  # noqa: B018 - all must be there
    except (KeyError, TypeError, ValueError):
        log.error("refusing a malformed node call: %.300r", call)
        return
    started = datetime.now(timezone.utc)
    completion: dict[str, Any] = {
        "kind": DONE, "call_id": call_id, "node": call["node"], "attempt": call["attempt"],
        "epoch": call.get("epoch", 0), "machine": grant.machine, "gpus": list(grant.gpus),
        "started_at": started.isoformat(),
    }
    # First make sure this delivery is the one that may run the call: a copy that may not (see
    # Books.start) must not give back a grant, nor report an error, for the copy that does.
    if not runtime.placer.start(grant, uuid.uuid4().hex):
        log.warning("dropping call %s: it is running already, or settled, or its grant is void", call_id)
        return
    if flow_name not in runtime.registry.names():
        # Never import what a message names: only flows this installation registered may run.
        log.error("refusing call %s: flow %r is not registered on this worker (registered: %s)", call_id,
                  flow_name, ", ".join(runtime.registry.names()) or "none")
        completion.update(status="error", error=f"flow {flow_name!r} is not registered on machine "
                                                f"{grant.machine}; add its module or file to FLUKSIO_FLOWS there")
        _settle(runtime, run_id, grant, completion)
        return
    claimed = call.get("code_digest")  # absent from an older driver's calls: those run as before
    claimed = None if claimed is None else str(claimed)
    flow = runtime.registry.get(flow_name) if claimed is None else runtime.registry.version(flow_name, claimed)
    if flow is None:
        # Running it would record this worker's code under the run's digest: a cache entry that a
        # later run of the other code would be handed.
        here = runtime.registry.digest(flow_name)
        log.error("refusing call %s of run %s: flow %r was loaded here as %s, the run was claimed with %s",
                  call_id, run_id, flow_name, here, claimed)
        completion.update(status="error", error=other_code(grant.machine, flow_name, here, claimed))
        _settle(runtime, run_id, grant, completion)
        return
    runtime.events.publish("node_started", run_id=run_id, node=call["node"], machine=grant.machine,
                           gpus=list(grant.gpus), attempt=call["attempt"])
    try:
        try:
            node = flow.nodes[call["node"]]
        except KeyError:
            raise NodeFailed(f"flow {flow_name!r} has no node {call['node']!r} on this worker") from None
        if grant.gpus:
            outputs, artifacts, logs = run_in_child(call, grant.gpus, node.timeout_s)
        else:
            outputs, artifacts, logs = run_node_here(runtime, node, call)
        completion.update(status="ok", outputs=outputs, artifacts=artifacts, logs=logs)
    except NodeFailed as exc:
        completion.update(status="error", error=str(exc), logs=getattr(exc, "logs", None))
    except interrupt.CallCancelled:
        completion.update(status="error", error="cancelled while running")
    except ArtifactError as exc:  # the store failed or timed out: this node's error (retried per its retries)
        completion.update(status="error", error=str(exc))
    except Exception as exc:  # anything else fluksio itself got wrong must still end the call
        log.exception("node call %s failed inside fluksio", call_id)
        completion.update(status="error", error=f"fluksio failed to run the node: {type(exc).__name__}: {exc}")
    _settle(runtime, run_id, grant, completion)


def other_code(machine: str, flow: str, here: str, claimed: str) -> str:
    """Why a call was refused: ``machine`` loaded other code for ``flow`` than its run was claimed with."""
    return (f"machine {machine} loaded other code for flow {flow!r} than this run was claimed with "
            f"({short(here)} here, {short(claimed)} in the run's driver): its files changed since one of them "
            f"started; restart `fluksio worker` on {machine} (or the drivers) so that both load the same code")


def _settle(runtime: Runtime, run_id: str, grant: Grant, completion: dict[str, Any]) -> None:
    completion["finished_at"] = datetime.now(timezone.utc).isoformat()
    for key in ("error", "logs"):  # PostgreSQL's text cannot hold NUL characters
        if isinstance(completion.get(key), str):
            completion[key] = completion[key].replace("\x00", "\\0")
    try:
        # Give the resources back before telling the driver, so its next claim can use them.
        runtime.placer.release(grant)
    finally:
        runtime.inbox.push(run_id, completion)


def run_node_here(runtime: Runtime, node: NodeSpec, call: dict[str, Any], use_timeout: bool = True,
                  ) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """Run the node in this process; returns its encoded outputs, the artifacts it made, and its logs."""
    store = runtime.artifacts
    args = [decode(call["inputs"][m], store) for m in node.requires]
    sink = MetricSink(runtime.db, call["run_id"])
    if node.streams:
        # A retried or resumed call counts its steps from 0 again: what an earlier attempt wrote goes.
        delete_metrics(runtime.db, call["run_id"], node.streams)
    streamed: dict[str, Any] = {}

    def emit(name: str, value: Any) -> None:
        if name not in node.streams:
            declared = ", ".join(node.streams) or "nothing"
            raise NodeFailed(f"node {node.name!r} emitted {name!r}, but it streams only: {declared}")
        sink.record(name, value)
        if not (isinstance(value, float) and not math.isfinite(value)):
            # The message's value is the last emission JSON can carry; NaN and infinities are dropped.
            streamed[name] = value

    kwargs = {"emit": emit} if node.takes_emit else {}
    limit = runtime.settings.log_limit_chars
    outcome: dict[str, Any] = {}

    def target() -> None:
        with capture_output(limit) as captured:
            interrupt.running(call["call_id"])
            try:
                outcome["value"] = node.fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - the node's failure is data, reported below
                outcome["error"] = exc
                captured.write(traceback.format_exc())
            finally:
                interrupt.finished(call["call_id"])
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
            interrupt.interrupt(call["call_id"])  # stop it at its next Python instruction
            failure = NodeFailed(f"node {node.name!r} timed out after {node.timeout_s:g} s")
            failure.logs = outcome.get("logs")  # type: ignore[attr-defined]
            raise failure
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
        failure.logs = logs  # type: ignore[attr-defined]
        raise
    except ArtifactError as exc:
        # Storing an output failed (the store is unreachable, timed out, refused it): this node failed, and
        # its retries decide what happens next, never the driver.
        unstored = NodeFailed(f"node {node.name!r} could not store its outputs: {exc}")
        unstored.logs = logs  # type: ignore[attr-defined]
        raise unstored from None
    artifacts = [
        {"message": m, **ref["$artifact"]}
        for m, value in encoded.items() for ref in find_refs(value)
    ]
    return encoded, artifacts, logs


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
