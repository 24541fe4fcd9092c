"""GPU calls run in a process of their own that sees exactly its granted GPUs: here, a fresh interpreter.

CUDA reads ``CUDA_VISIBLE_DEVICES`` once per process, so a pool process that
ran a call on GPU 0 cannot later run one on GPU 1 by changing the variable. A
call granted GPUs therefore runs in a child process started with the variable
set to its grant; the child dies with its parent (a killed or cancelled call
takes its child with it) and reports on its last stdout line.

A worker with GPUs forks its calls from a warm fork server instead
(fluksio/execution/forkserver.py, warm.py); this fresh interpreter is what it
falls back to, and what :func:`run_reported` runs in either.

A call of a shipped code package runs in a child too, whether granted GPUs or
not (fluksio/execution/shipped.py): told the package's folder, the child
imports that package alone, never ``FLUKSIO_FLOWS``, and keeps the node's
timeout itself (only a process that imported the package knows it). With a
fork server, such a call granted no GPUs runs in one of its package server's
runners instead (fluksio/execution/runners.py), through :func:`run_reported`
too.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Literal

from fluksio.errors import NodeFailed
from fluksio.execution.code_cache import hold
from fluksio.execution.ran import Ran
from fluksio.execution.run_here import run_node_here
from fluksio.execution.secrets import secret_inputs
from fluksio.execution.shipped import LoadedPackage, load_package
from fluksio.flows.node import error_types
from fluksio.flows.source import short
from fluksio.messages import Completion, NodeCall
from fluksio.runtime import Runtime
from fluksio.settings import Settings, load_settings

#: The child's report is the stdout line that starts with this.
RESULT_MARKER = "FLUKSIO-RESULT:"
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies (even by kill -9)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def run_in_child(call: NodeCall, gpus: tuple[int, ...], timeout_s: float | None, package: Path | None = None,
                 settings: Settings | None = None) -> Ran:
    """Run the call in a child with ``CUDA_VISIBLE_DEVICES`` = ``gpus``; returns what it made. ``package``: the
    folder of the call's shipped code package, which the child imports instead of ``FLUKSIO_FLOWS``;
    ``settings``: the child's (default: it reads them from the environment, as a worker does)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    told = [] if package is None else [str(package)]
    # On its stdin, not its command line: the settings may hold passwords, which `ps` would show anyone.
    sent = {"call": call.to_wire(), "settings": None if settings is None else settings.model_dump(mode="json")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fluksio.execution.isolated", *told], input=json.dumps(sent),
            capture_output=True, text=True, env=env, timeout=timeout_s, preexec_fn=die_with_parent,  # noqa: PLW1509
        )
    except subprocess.TimeoutExpired as exc:
        raise NodeFailed(f"node {call.node!r} timed out after {timeout_s:g} s",
                         logs=_text(exc.stdout) + _text(exc.stderr),
                         error_types=error_types(TimeoutError())) from None
    lines = done.stdout.splitlines()
    report = next((line for line in reversed(lines) if line.startswith(RESULT_MARKER)), None)
    noise = "\n".join(line for line in lines if not line.startswith(RESULT_MARKER))
    if report is None:
        logs = (noise + "\n" + done.stderr).strip()
        if done.returncode == -signal.SIGKILL:
            # Nothing in fluksio kills it so (a cancel kills its parent, and the parent's end this child):
            # the kernel's OOM killer does, or a person with kill -9.
            raise NodeFailed(f"out of memory: the process running node {call.node!r} was killed by SIGKILL (the "
                             "kernel's OOM killer, or kill -9)", logs=logs, oom=True)
        raise NodeFailed(f"the process running node {call.node!r} exited with code {done.returncode} before "
                         "reporting", logs=logs)
    # The child reports as a completion would (the same fields, checked the same way).
    return reported(Completion.from_wire(json.loads(report[len(RESULT_MARKER):])), noise, done.stderr)


def run_package_in_child(call: NodeCall, gpus: tuple[int, ...], package: Path, settings: Settings | None = None) -> Ran:
    """Run a call of the shipped code package unpacked in ``package`` in a fresh interpreter that sees ``gpus``
    (none: ``CUDA_VISIBLE_DEVICES`` is empty); the child keeps the node's timeout. ``settings``: the child's, for
    a process whose settings are not all in its environment (the embedded default's may be passed in code)."""
    return run_in_child(call, gpus, None, package=package, settings=settings)


def reported(result: Completion, *noise: str) -> Ran:
    """What a child's report says the call made (:class:`NodeFailed` if it failed); ``noise``: what else the
    child wrote to its stdout and stderr (a C library's prints, a crash's traceback), added to its logs."""
    logs = "\n".join(part for part in (result.logs or "", *noise) if part)
    if not result.ok:
        raise NodeFailed(result.error or "failed", logs=logs, error_types=result.error_types, oom=result.oom)
    return Ran(result.outputs or {}, result.artifacts, logs)


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def run_reported(runtime: Runtime, call: NodeCall, package: LoadedPackage | None = None) -> Completion:
    """Run ``call`` in this process, a child that exists for it alone (or a package's runner, which runs one call
    after another: fluksio/execution/runners.py); how it ended, as the child reports it.

    A call claimed with other code than this process loaded is refused: the child imported the flow's files
    (or its fork server did) after its worker did, and they changed in between. ``package``: the call's
    shipped code package, imported here (or by the package server this child was forked from) instead of
    ``FLUKSIO_FLOWS``; its node's timeout is kept here, since no process above this one imported it.
    """
    def report(status: Literal["ok", "error"], ran: Ran | None = None, error: str | None = None,
               logs: str | None = None, failed: NodeFailed | None = None) -> Completion:
        return Completion(call_id=call.call_id, node=call.node, index=call.index, attempt=call.attempt, status=status,
                          outputs=ran.outputs if ran else None, artifacts=ran.artifacts if ran else (),
                          logs=ran.logs if ran else logs, error=error,
                          error_types=failed.error_types if failed else (), oom=failed.oom if failed else False)

    try:
        if package is not None:
            flow, node = package.node_for(call)
            return report("ok", run_node_here(runtime, node, call, use_timeout=True, secrets=secret_inputs(flow)))
        flow = runtime.registry.get(call.flow)
        claimed, here = call.code_digest, runtime.registry.digest(call.flow)
        if claimed is not None and claimed != here:
            # This process imported the flow's files as they are now, not as its worker loaded them.
            machine = call.grant.machine
            raise NodeFailed(f"the process started on machine {machine} to run node {call.node!r} on its "
                             f"GPUs loaded other code for flow {call.flow!r} than this run was claimed with "
                             f"({short(here)} on disk there now, {short(claimed)} in the run's driver): its "
                             f"files changed since `fluksio worker` started on {machine}; restart it (or the "
                             "drivers) so that both load the same code")
        return report("ok", run_node_here(runtime, flow.nodes[call.node], call, use_timeout=False,
                                          secrets=secret_inputs(flow)))
    except NodeFailed as exc:
        return report("error", error=str(exc), logs=exc.logs, failed=exc)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the node with it
        return report("error", error=f"{type(exc).__name__}: {exc}")


def main() -> None:
    sent = json.loads(sys.stdin.read())
    call = NodeCall.from_wire(sent["call"])
    settings = load_settings() if sent["settings"] is None else Settings(**sent["settings"])
    if len(sys.argv) > 1:  # a shipped code package's folder: its flows alone, never FLUKSIO_FLOWS
        hold(Path(sys.argv[1]))  # its files stay in the code cache while this call may import from them
        package = load_package(Path(sys.argv[1]), call.code_entry or "")
        done = run_reported(Runtime.standalone(settings, package.registry), call, package)
    else:
        done = run_reported(Runtime.standalone(settings), call)
    out = sys.__stdout__
    assert out is not None  # a child started by run_in_child always has its stdout piped
    out.write("\n" + RESULT_MARKER + json.dumps(done.to_wire()) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
