"""Running a node's function in this process: its arguments received, its output captured, its values encoded.

What a node call does once it may run, wherever it runs: in the worker's own process
(:mod:`fluksio.execution.call`), or in a child that exists for it alone, forked from a fork server or a
fresh interpreter (:mod:`fluksio.execution.isolated`). Whatever the function does — raise, return the wrong
shape, return something that is not JSON, run past its timeout — it ends as a :class:`NodeFailed` carrying
its logs, never as another exception.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any

from fluksio.artifacts.artifact import REF_KEY, Artifact, find_refs
from fluksio.artifacts.store import ArtifactStore
from fluksio.errors import ArtifactError, FluksioError, NodeFailed
from fluksio.execution import interrupt
from fluksio.execution.capture import capture_output
from fluksio.execution.emitter import Emitter
from fluksio.execution.ran import Ran
from fluksio.execution.secrets import carried, hidden, redact
from fluksio.execution.secrets import resolve as resolve_secret
from fluksio.execution.values import encode, receive
from fluksio.flows.node import NodeSpec, error_types
from fluksio.flows.secret import NAME as SECRET_NAME
from fluksio.messages import MadeArtifact, NodeCall
from fluksio.runtime import Runtime

#: What a row's error starts with when its call ran out of memory.
OUT_OF_MEMORY = "out of memory: "
#: The error types of a call that ran past its ``timeout_s`` (``retry_on=(TimeoutError,)`` retries it).
TIMED_OUT = error_types(TimeoutError())
#: The name of the thread a call with a timeout runs on starts with this (a package's runner that finds one
#: still alive after the call gave up on it, and exits: fluksio/execution/runners.py).
NODE_THREAD = "fluksio-node-"


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
        encoded = _encode(node, outcome.get("value"), emitter.outputs(), runtime.artifacts)
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
            outcome["capture"] = captured  # what it printed so far, should it run past its timeout
            interrupt.running(call.call_id)
            try:
                outcome["value"] = node.fn(**kwargs)
            except BaseException as exc:  # noqa: BLE001 - the node's failure is data, reported below
                outcome["error"] = _at_the_callers_line(exc)
                captured.write("".join(traceback.format_exception(exc)))
            finally:
                interrupt.finished(call.call_id)
                outcome["logs"] = captured.text

    if node.timeout_s is None or not use_timeout:
        target()
        return outcome
    # A thread cannot be killed; the call is reported as timed out and its grant is returned while the
    # abandoned thread finishes on its own.
    runner = threading.Thread(target=target, name=f"{NODE_THREAD}{node.name}", daemon=True)
    runner.start()
    runner.join(node.timeout_s)
    if runner.is_alive():
        interrupt.interrupt(call.call_id)  # stop it at its next Python instruction
        so_far = outcome.get("logs") or (outcome["capture"].text if "capture" in outcome else None)
        raise NodeFailed(f"node {node.name!r} timed out after {node.timeout_s:g} s", logs=so_far,
                         error_types=TIMED_OUT)
    return outcome


def _encode(node: NodeSpec, value: Any, streamed: dict[str, Any], store: ArtifactStore) -> dict[str, Any]:
    """The node's outputs (and the last value of each message and metric it emitted) as JSON, codec values
    stored."""
    made: list[Artifact] = []
    encoded = {m: encode(v, store, made, f"message {m!r} of node {node.name!r}", m)
               for m, v in _shape_outputs(node, value).items()}
    for message, last in streamed.items():
        encoded[message] = encode(last, store, made, f"streamed message {message!r} of node {node.name!r}", message)
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


def _at_the_callers_line(exc: BaseException) -> BaseException:
    """``exc``, its traceback ending at the node's own line when fluksio raised it on purpose because of how the
    node called it (``emit("acc", "high")``): the mistake is on that line, not inside fluksio, and the error
    column and the logs say so. Any other exception keeps every frame (a bug of fluksio's shows where it is)."""
    if isinstance(exc, FluksioError):
        callers = None
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_globals.get("__name__", "").partition(".")[0] != "fluksio":
                callers = tb
            tb = tb.tb_next
        if callers is not None:
            callers.tb_next = None
    return exc


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
