"""One node call: run the function with its inputs, capture its logs and outputs, report to the driver.

Whatever the node does — raise, return the wrong shape, return something that
is not JSON, run past its timeout — ends as an ``error`` completion for that
node. Nothing it does reaches the worker or the store as an exception.
"""

from __future__ import annotations

import logging
import threading
import traceback
import uuid
from datetime import datetime, timezone
from typing import Any, Literal

from fluksio.artifacts.artifact import REF_KEY, Artifact, find_refs
from fluksio.artifacts.store import ArtifactStore
from fluksio.errors import (
    ArtifactError,
    BrokerUnavailable,
    CallNotStarted,
    MessageRefused,
    NodeFailed,
    StoreUnavailable,
)
from fluksio.execution import handoff, interrupt
from fluksio.execution.capture import capture_output
from fluksio.execution.emitter import Emitter
from fluksio.execution.isolated import run_in_child
from fluksio.execution.ran import Ran
from fluksio.execution.secrets import carried, hidden, redact, secret_inputs
from fluksio.execution.secrets import resolve as resolve_secret
from fluksio.execution.values import encode, receive
from fluksio.execution.warm import StartOnGpus
from fluksio.failures import redis_outage
from fluksio.flows.flow import Flow
from fluksio.flows.node import NodeSpec, error_types
from fluksio.flows.secret import NAME as SECRET_NAME
from fluksio.flows.source import short
from fluksio.messages import Completion, MadeArtifact, NodeCall
from fluksio.runtime import Runtime
from fluksio.store.run_rows import call_refusal

log = logging.getLogger(__name__)

#: What a row's error starts with when its call ran out of memory.
OUT_OF_MEMORY = "out of memory: "
#: The error types of a call that ran past its ``timeout_s`` (``retry_on=(TimeoutError,)`` retries it).
TIMED_OUT = error_types(TimeoutError())


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
    try:
        if runtime.settings.signing:
            refusal = replay_refusal(runtime, call)
            if refusal is not None:
                # Signed by someone trusted, but not for now or not for here: a copy sent again. Its grant and
                # its run belong to the call it copies (or to nobody): nothing is given back, nothing reported.
                log.error("refusing call %s: %s", call.call_id, refusal)
                return
        flow, flow_refusal = _flow_for(runtime, call)  # only a look: whether this copy may run it is asked next
        # First make sure this delivery is the one that may run the call: a copy that may not (see
        # Books.start) must not give back a grant, nor report an error, for the copy that does.
        # Its node_started is said in the same step, unless the call cannot run here (its flow is refused).
        started_event = None if flow is None else {
            "run_id": call.run_id, "node": call.unit, "machine": grant.machine, "gpus": list(grant.gpus),
            "attempt": call.attempt}
        if not handoff.start(runtime, grant, uuid.uuid4().hex, started_event):
            log.warning("dropping call %s: it is running already, or settled, or its grant is void", call.call_id)
            return
    except Exception as exc:
        if not _outage(exc):
            # fluksio itself failed here, and would again on every delivery: the call ends as an error, its
            # grant given back, rather than its message being acknowledged with the grant held and its run
            # left waiting for a call that never runs.
            log.exception("node call %s: checking that it may start failed inside fluksio", call.call_id)
            settle(runtime, call, started=started, status="error",
                   error=f"fluksio could not check that the call may start: {type(exc).__name__}: {exc}")
            return
        # Whether this delivery may run the call is unknown: neither run it nor give back a grant that may be
        # another delivery's. Its message goes back to its queue (execution/task.py) for when the store is back.
        raise CallNotStarted(f"call {call.call_id}: could not check that it may start: {type(exc).__name__}: "
                             f"{exc}") from exc
    if flow is None:
        settle(runtime, call, started=started, status="error", error=flow_refusal)
        return
    try:
        node = flow.nodes.get(call.node)
        if node is None:
            raise NodeFailed(f"flow {call.flow!r} has no node {call.node!r} on this worker")
        if grant.gpus:
            ran = start_on_gpus(call, grant.gpus, node.timeout_s)
        else:
            ran = run_node_here(runtime, node, call, secrets=secret_inputs(flow))
        settle(runtime, call, started=started, status="ok", outputs=ran.outputs, artifacts=ran.artifacts, logs=ran.logs)
    except NodeFailed as exc:
        settle(runtime, call, started=started, status="error", error=str(exc), logs=exc.logs,
               error_types=exc.error_types, oom=exc.oom)
    except interrupt.CallCancelled:
        settle(runtime, call, started=started, status="error", error="cancelled while running")
    except ArtifactError as exc:  # the store failed or timed out: this node's error (retried per its retries)
        settle(runtime, call, started=started, status="error", error=str(exc))
    except Exception as exc:  # anything else fluksio itself got wrong must still end the call
        log.exception("node call %s failed inside fluksio", call.call_id)
        settle(runtime, call, started=started, status="error",
               error=f"fluksio failed to run the node: {type(exc).__name__}: {exc}")


def _outage(exc: Exception) -> bool:
    """Whether ``exc`` says the run store or the broker's Redis was out for longer than its bound (their
    clients wait out shorter outages themselves)."""
    return isinstance(exc, (StoreUnavailable, BrokerUnavailable)) or redis_outage(exc)


def replay_refusal(runtime: Runtime, call: NodeCall) -> str | None:
    """Why a signed call must not run here now, or ``None``: it was granted to this machine, its run is
    running in the drive that sent it, and its attempt has not ended.

    Celery checked the signature; this checks what a signature cannot: that the message is not an old one
    sent again (whoever can write to the broker can read its messages, and forge a grant in the placer's
    books to match). The run store is the truth, and the broker cannot write to it.
    """
    if call.grant.machine != runtime.machine:
        return f"it was granted to machine {call.grant.machine}, and this is {runtime.machine}"
    return call_refusal(runtime.db, call.run_id, call.epoch, call.node, -1 if call.index is None else call.index,
                        call.attempt)


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


def settle(runtime: Runtime, call: NodeCall, *, started: str | None, status: Literal["ok", "error"],
           outputs: dict[str, Any] | None = None, artifacts: tuple[MadeArtifact, ...] = (), logs: str | None = None,
           error: str | None = None, error_types: tuple[str, ...] = (), oom: bool = False) -> None:
    """Give the call's resources (and pool slot) back, then push its completion onto its driver's inbox.

    Also for a call whose process died under it (``execution.lost``): the one place a completion is made.
    """
    grant = call.grant
    completion = Completion(
        call_id=call.call_id, node=call.node, index=call.index, attempt=call.attempt, status=status,
        machine=grant.machine,
        gpus=tuple(grant.gpus), started_at=started, finished_at=datetime.now(timezone.utc).isoformat(),
        epoch=call.epoch, outputs=outputs, artifacts=artifacts, logs=_storable(logs), error=_storable(error),
        error_types=error_types, oom=oom,
    )
    handoff.give_back(runtime, grant, call.run_id, completion)


def _storable(text: str | None) -> str | None:
    """PostgreSQL's text cannot hold NUL characters."""
    return text.replace("\x00", "\\0") if text is not None else None


def run_node_here(runtime: Runtime, node: NodeSpec, call: NodeCall, use_timeout: bool = True,
                  secrets: frozenset[str] = frozenset()) -> Ran:
    """Run the node in this process; returns its encoded outputs, the artifacts it made, and its logs.

    ``secrets``: the messages that are the flow's ``Secret`` inputs (their value in the call is a name, which
    is resolved here; what the node logs and returns is kept free of the values: fluksio/execution/secrets.py).
    """
    store = runtime.artifacts
    # By name: a message that was skipped upstream is left out, and its parameter takes its default.
    kwargs = {param: receive(node, param, m, call.inputs[m], store)
              for param, m in zip(node.params or node.requires, node.requires) if m in call.inputs and m not in secrets}
    held = _secret_arguments(runtime, node, call, secrets)
    kwargs.update(held)
    with hidden(s.value for s in held.values()) as values:
        return _run(runtime, node, call, kwargs, use_timeout, values)


def _secret_arguments(runtime: Runtime, node: NodeSpec, call: NodeCall, secrets: frozenset[str]) -> dict[str, Any]:
    """The node's ``Secret`` arguments, by parameter, resolved on this worker (:class:`NodeFailed` if it lacks one)."""
    found: dict[str, Any] = {}
    for param, message in zip(node.params or node.requires, node.requires):
        if message in secrets and message in call.inputs:
            name = call.inputs[message]
            if not isinstance(name, str) or not SECRET_NAME.match(name):
                raise NodeFailed(f"input {message!r} of node {node.name!r} is a Secret, and the call names none")
            found[param] = resolve_secret(name, runtime.settings, runtime.machine, node.name)
    return found


def _run(runtime: Runtime, node: NodeSpec, call: NodeCall, kwargs: dict[str, Any], use_timeout: bool,
         secrets: frozenset[str]) -> Ran:
    emitter = Emitter(runtime.db, node, call)
    if node.takes_emit:
        kwargs["emit"] = emitter.emit
    outcome = _call(node, call, kwargs, runtime.settings.log_limit_chars, secrets, use_timeout)
    logs = outcome.get("logs", "")
    try:
        emitter.flush()
        if "error" in outcome:
            failure = failure_of(outcome["error"])
            raise NodeFailed(redact(str(failure), secrets) or "failed", error_types=failure.error_types,
                             oom=failure.oom)
        encoded = _encode(node, outcome.get("value"), emitter.streamed, runtime.artifacts)
        if secrets and carried(encoded, secrets):
            raise NodeFailed(f"node {node.name!r} put the value of a secret into its outputs, which would store it in "
                             "the run's rows: a secret's value stays inside the node that received it")
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


def _call(node: NodeSpec, call: NodeCall, kwargs: dict[str, Any], limit: int, secrets: frozenset[str],
          use_timeout: bool) -> dict[str, Any]:
    """Call the node's function, capturing what it prints: ``{"value": …}`` or ``{"error": exc}``, and ``"logs"``."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        with capture_output(limit, hide=secrets) as captured:
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
        return outcome
    # A thread cannot be killed; the call is reported as timed out and its grant is returned while the
    # abandoned thread finishes on its own.
    runner = threading.Thread(target=target, name=f"fluksio-node-{node.name}", daemon=True)
    runner.start()
    runner.join(node.timeout_s)
    if runner.is_alive():
        interrupt.interrupt(call.call_id)  # stop it at its next Python instruction
        raise NodeFailed(f"node {node.name!r} timed out after {node.timeout_s:g} s", logs=outcome.get("logs"),
                         error_types=TIMED_OUT)
    return outcome


def _encode(node: NodeSpec, value: Any, streamed: dict[str, Any], store: ArtifactStore) -> dict[str, Any]:
    """The node's outputs (and the last value of each streamed message) as JSON, codec values stored."""
    made: list[Artifact] = []
    encoded = {m: encode(v, store, made, f"message {m!r} of node {node.name!r}", m)
               for m, v in _shape_outputs(node, value).items()}
    for message in node.streams:
        encoded[message] = encode(streamed.get(message), store, made,
                                  f"streamed message {message!r} of node {node.name!r}", message)
    return encoded


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


def failure_of(exc: BaseException) -> NodeFailed:
    """The node raised ``exc``: its failure, with the exception's class names, and whether memory ran out."""
    oom = isinstance(exc, MemoryError)
    return NodeFailed(f"{OUT_OF_MEMORY}{_describe(exc)}" if oom else _describe(exc), error_types=error_types(exc),
                      oom=oom)


def _describe(exc: BaseException) -> str:
    """``ValueError: boom (at train.py:12 in fit)``: the error and the innermost frame that raised it."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"
