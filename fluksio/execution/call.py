"""One node call on a worker: admit it, run it, and report how it ended to its driver.

Admitting makes sure this delivery of the call's message is the one that may
run it (:func:`admit`); running it happens in this process or in a child on its
GPUs (:func:`run_admitted`, with :mod:`fluksio.execution.run_here` doing the
function's part). A call whose code this worker did not register but that came
with a code package runs, if ``FLUKSIO_ACCEPT_CODE`` lets it
(fluksio/security/code_trust.py), in a process that imports that package
(fluksio/execution/package_server.py, runners.py), never in this process.
Whatever the node does — raise, return the wrong shape, return something
that is not JSON, run past its timeout — ends as an ``error`` completion for
that node. Nothing it does reaches the worker or the store as an exception.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from fluksio.errors import (
    ArtifactError,
    BrokerUnavailable,
    CallNotStarted,
    MessageRefused,
    NodeFailed,
    StoreUnavailable,
    first_line,
)
from fluksio.execution import handoff, interrupt
from fluksio.execution.code_cache import CodeCache
from fluksio.execution.isolated import run_in_child, run_package_in_child
from fluksio.execution.run_here import run_node_here
from fluksio.execution.secrets import secret_inputs
from fluksio.execution.warm import StartOnGpus, StartPackaged
from fluksio.failures import redis_outage
from fluksio.flows.flow import Flow
from fluksio.flows.package import PackageError
from fluksio.flows.source import short
from fluksio.messages import Completion, MadeArtifact, NodeCall
from fluksio.runtime import Runtime
from fluksio.security.code_trust import code_refusal
from fluksio.store.run_rows import call_refusal

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class Admitted:
    """A call this delivery may run: its grant is marked started here, and it must now be settled."""

    call: NodeCall
    #: The flow this worker registered for the call; ``None``: the call runs the code package it came with,
    #: which only the child that runs it imports.
    flow: Flow | None
    #: When the worker took it: ISO 8601, UTC.
    started: str


def execute_call(runtime: Runtime, wire: Any, start_on_gpus: StartOnGpus = run_in_child,
                 start_packaged: StartPackaged = run_package_in_child) -> None:
    """Run the call the message ``wire`` describes (see :class:`~fluksio.messages.NodeCall`) and push its completion.

    Whatever happens, a call that reached this worker ends with its grant given back and a completion
    in its driver's inbox — else its run would wait for it forever. A message that is not a node call
    fluksio sends is refused before anything runs (there is nobody to report to). A call granted GPUs runs
    in a process of its own that sees only them: ``start_on_gpus`` starts it (a fresh interpreter, unless
    the worker has a fork server: fluksio/execution/warm.py). A call of a shipped code package runs in a
    process that imports the package: ``start_packaged`` starts it (likewise).
    """
    admitted = admit(runtime, wire)
    if admitted is not None:
        run_admitted(runtime, admitted, start_on_gpus, start_packaged)


def admit(runtime: Runtime, wire: Any) -> Admitted | None:
    """The call ``wire`` describes, once this delivery is the one that may run it; ``None`` when it must not run.

    A message that is not a node call, a signed copy sent again, and a second delivery of a call that runs
    already are dropped without a word to the driver (they are not the call's, or the call is someone
    else's to settle). A call whose flow this worker refuses is settled here as an error. Raises
    :class:`~fluksio.errors.CallNotStarted` when the store or the broker is out and whether it may run is
    unknown: its message goes back to its queue (execution/task.py).
    """
    try:
        call = NodeCall.from_wire(wire)
    except MessageRefused as exc:
        log.error("%s", exc)
        return None
    grant = call.grant
    started = datetime.now(timezone.utc).isoformat()
    try:
        if runtime.settings.signing:
            refusal = replay_refusal(runtime, call)
            if refusal is not None:
                # Signed by someone trusted, but not for now or not for here: a copy sent again. Its grant and
                # its run belong to the call it copies (or to nobody): nothing is given back, nothing reported.
                log.error("refusing call %s: %s", call.call_id, refusal)
                return None
        flow, flow_refusal = _flow_for(runtime, call)  # only a look: whether this copy may run it is asked next
        # First make sure this delivery is the one that may run the call: a copy that may not (see
        # Books.start) must not give back a grant, nor report an error, for the copy that does.
        # Its node_started is said in the same step, unless the call cannot run here (its flow is refused).
        started_event = None if flow_refusal is not None else {
            "run_id": call.run_id, "node": call.unit, "machine": grant.machine, "gpus": list(grant.gpus),
            "attempt": call.attempt}
        if not handoff.start(runtime, grant, uuid.uuid4().hex, started_event):
            log.warning("dropping call %s: it is running already, or settled, or its grant is void", call.call_id)
            return None
    except Exception as exc:
        if not _outage(exc):
            # fluksio itself failed here, and would again on every delivery: the call ends as an error, its
            # grant given back, rather than its message being acknowledged with the grant held and its run
            # left waiting for a call that never runs.
            log.exception("node call %s: checking that it may start failed inside fluksio", call.call_id)
            settle(runtime, call, started=started, status="error",
                   error=f"fluksio could not check that the call may start: {type(exc).__name__}: {exc}")
            return None
        # Whether this delivery may run the call is unknown: neither run it nor give back a grant that may be
        # another delivery's. Its message goes back to its queue (execution/task.py) for when the store is back.
        raise CallNotStarted(f"call {call.call_id}: could not check that it may start: {type(exc).__name__}: "
                             f"{exc}") from exc
    if flow_refusal is not None:
        settle(runtime, call, started=started, status="error", error=flow_refusal)
        return None
    return Admitted(call, flow, started)


def run_admitted(runtime: Runtime, admitted: Admitted, start_on_gpus: StartOnGpus = run_in_child,
                 start_packaged: StartPackaged = run_package_in_child) -> None:
    """Run an admitted call — on its GPUs in a child of its own, or in this process; a call of a shipped code
    package in a process that imports it — and settle it."""
    call = admitted.call
    try:
        if admitted.flow is None:
            ran = start_packaged(call, call.grant.gpus, _checkout(runtime, call))
        else:
            node = admitted.flow.nodes.get(call.node)
            if node is None:
                raise NodeFailed(f"flow {call.flow!r} has no node {call.node!r} on this worker")
            if call.grant.gpus:
                ran = start_on_gpus(call, call.grant.gpus, node.timeout_s)
            else:
                ran = run_node_here(runtime, node, call, secrets=secret_inputs(admitted.flow))
        settle(runtime, call, started=admitted.started, status="ok", outputs=ran.outputs, artifacts=ran.artifacts,
               logs=ran.logs)
    except (Exception, interrupt.CallCancelled) as exc:
        settle(runtime, call, started=admitted.started, status="error", **_failure(call, exc))


def _failure(call: NodeCall, exc: BaseException) -> dict[str, Any]:
    """What a completion says of a call that failed with ``exc``: the node's own failure as it reported it, a
    cancel, the artifact store's failure (this node's, retried per its retries), or fluksio's own bug."""
    if isinstance(exc, NodeFailed):
        return {"error": str(exc), "logs": exc.logs, "error_types": exc.error_types, "oom": exc.oom}
    if isinstance(exc, interrupt.CallCancelled):
        return {"error": "cancelled while running"}
    if isinstance(exc, ArtifactError):
        return {"error": str(exc)}
    # Anything else fluksio itself got wrong must still end the call.
    log.error("node call %s failed inside fluksio", call.call_id, exc_info=exc)
    return {"error": f"fluksio failed to run the node: {type(exc).__name__}: {exc}"}


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


def _checkout(runtime: Runtime, call: NodeCall) -> Path:
    """The folder of the call's code package, unpacked in this worker's code cache (fetched if need be)."""
    assert call.code_digest is not None  # admitted as a package call: it names its package
    cache = CodeCache.of(runtime.settings)  # it keeps nothing in memory (the folder is its state): one per call
    try:
        return cache.checkout(runtime.artifacts, call.code_digest)
    except PackageError as exc:  # missing, altered, unsafe: never imported, said in one line
        raise NodeFailed(first_line(str(exc))) from None
    except OSError as exc:  # the cache's folder: not writable, a full disk
        raise NodeFailed(f"code package {short(call.code_digest)} cannot be unpacked into the code cache "
                         f"{cache.folder} on machine {call.grant.machine}: {exc.strerror or exc}; free space "
                         "there, or lower FLUKSIO_CODE_CACHE_MB") from None


def _flow_for(runtime: Runtime, call: NodeCall) -> tuple[Flow | None, str | None]:
    """The flow the call runs here and ``None``; ``(None, None)`` for a call that runs the code package it
    came with; or ``None`` and why it is refused.

    A flow this worker registered with the code the run was claimed with runs as it always did, at the same
    cost; only a call whose code is not here is asked about (fluksio/security/code_trust.py).
    """
    machine = call.grant.machine
    registered = call.flow in runtime.registry.names()
    claimed = call.code_digest  # absent from an older driver's calls: those run as before
    if registered:
        flow = runtime.registry.get(call.flow) if claimed is None else runtime.registry.version(call.flow, claimed)
        if flow is not None:
            return flow, None
    if call.code_entry is not None and claimed is not None:
        refusal = code_refusal(runtime.settings, runtime.signer, call)
        if refusal is not None:
            log.error("refusing call %s of run %s: %s", call.call_id, call.run_id, refusal)
        return None, refusal
    if not registered:
        # Never import what a message names: only flows this installation registered may run.
        log.error("refusing call %s: flow %r is not registered on this worker (registered: %s)", call.call_id,
                  call.flow, ", ".join(runtime.registry.names()) or "none")
        return None, (f"flow {call.flow!r} is not registered on machine {machine}; add its module or file to "
                      "FLUKSIO_FLOWS there")
    # Running it would record this worker's code under the run's digest: a cache entry that a later run of
    # the other code would be handed.
    here = runtime.registry.digest(call.flow)
    log.error("refusing call %s of run %s: flow %r was loaded here as %s, the run was claimed with %s",
              call.call_id, call.run_id, call.flow, here, claimed)
    return None, other_code(machine, call.flow, here, claimed or "")


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
