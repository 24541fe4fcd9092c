"""GPU calls that start warm: forked from the worker's fork server (fluksio/execution/forkserver.py), with
a fresh interpreter (fluksio/execution/isolated.py) as the fallback.

A node worker with GPUs starts one :class:`WarmStarts` before its prefork pool, waits until the server has
loaded the flows (it loads them beside the worker, so that costs little), and every pool process inherits it.
Each GPU call then asks the server for a child over the inherited socket pair, passing its own ends with
``socket.send_fds``: a private stream socket (the child's report, the server's word that it is gone, and the
way to ask for a kill), and a pipe for what the child writes to its stdout and stderr.

What the fresh interpreter guaranteed still holds: the call sees exactly its GPU ids (the child sets
``CUDA_VISIBLE_DEVICES`` before anything can start CUDA, in a process that never started it); it dies with
the worker (the server dies with the worker, each child with the server) and with this pool process (a
cancel SIGKILLs it: its socket closes, and the server kills the child); a timeout kills it; its logs and
outputs come back; a call claimed with other code than the server loaded is refused. A server that could
not be used — a flow module started CUDA at import, it failed to load, it is gone — means fresh interpreters,
said once in the worker's log.

Calls of shipped code packages (:meth:`WarmStarts.run_packaged`) take the same way to their package's server
(fluksio/execution/package_server.py). One granted GPUs is forked there as above; one granted none runs in
one of that server's *runners* (fluksio/execution/runners.py), a process that runs the package's CPU calls one
after another, with no fork and no new runtime per call; this pool process keeps that runner for its later
calls of the package and hands them to it directly (fluksio/execution/kept.py), with the same guarantees: a
cancel kills it, the node's timeout is kept, the logs and outputs come back, it dies with the worker.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fluksio.errors import NodeFailed
from fluksio.execution.forking import LENGTH, REGISTERED
from fluksio.execution.isolated import die_with_parent, reported, run_in_child
from fluksio.execution.kept import KeptRunners
from fluksio.execution.package_server import package_header
from fluksio.execution.ran import Ran
from fluksio.flows.node import error_types
from fluksio.messages import Completion, NodeCall

#: Runs a call on its GPUs: ``(call, gpu ids, timeout in seconds or None)`` → what it made.
StartOnGpus = Callable[[NodeCall, tuple[int, ...], float | None], Ran]
#: Runs a call of a shipped code package in a process that imports it: ``(call, gpu ids (maybe none), the
#: package's unpacked folder)`` → what it made. That process keeps the node's timeout (only it knows it).
StartPackaged = Callable[[NodeCall, tuple[int, ...], Path], Ran]
#: Longest a worker waits for its fork server to load the flows, in seconds. The server loads them while
#: the worker loads them too, so it is rarely waited for at all; past this, GPU calls start fresh.
START_TIMEOUT_S = 300.0
#: After asking for a timed-out call to be killed, how long the server has to say it is gone, in seconds.
KILL_GRACE_S = 10.0
#: What is kept of a call's stdout and stderr (the end of it), in bytes.
OUTPUT_LIMIT = 1 << 20
#: The worker setting that turns warm starts off.
SETTING = "FLUKSIO_GPU_FORK_SERVER"

log = logging.getLogger(__name__)


class WarmStarts:
    """The worker's fork server, and GPU calls run in children forked from it (:meth:`run`)."""

    def __init__(self, process: subprocess.Popen[bytes], control: socket.socket) -> None:
        self.process = process
        #: The worker's end of the control socket pair; every pool process inherits it.
        self.control = control
        #: True once the server said it is ready; false in a process that found it gone.
        self.ready = False
        #: The flows the server loaded, as it said when it was ready.
        self.flows: list[str] = []
        #: The package runners this pool process keeps (each pool process its own).
        self.kept = KeptRunners(lambda header, fds: socket.send_fds(self.control, [header], fds))

    @classmethod
    def start(cls) -> WarmStarts:
        """Start the fork server (it loads the settings and flows from this process's environment)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "fluksio.execution.forkserver", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,  # noqa: PLW1509
            )
        finally:
            theirs.close()  # the server's alone now: when it dies, this end hears it
        return cls(process, ours)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> str | None:
        """Wait for the server's first word. ``None``: GPU calls start warm; else why they start in a fresh
        interpreter each (for the worker's log), and the server is stopped."""
        self.control.settimeout(timeout_s)
        try:
            raw = self.control.recv(1 << 16)
        except TimeoutError:
            raw = json.dumps({"failed": f"it was not ready within {timeout_s:g} s"}).encode()
            self.process.kill()
        finally:
            self.control.settimeout(None)  # the pool processes inherit the socket: blocking, as they expect
        said: dict[str, Any] = json.loads(raw) if raw else {}
        if "ready" in said:
            self.ready = True
            self.flows = list(said.get("flows") or [])
            return None
        if "cuda" in said:
            why = (f"{said['cuda']} once the flow modules are imported: a module starts CUDA at import time, and "
                   "a process that started CUDA cannot be forked for a call. Start CUDA inside the node functions "
                   f"to have them start warm (or set {SETTING}=false to say fresh interpreters are meant)")
        elif "failed" in said:
            why = f"its fork server could not be used: {said['failed']}"
        else:
            why = f"its fork server exited with code {self.process.wait()} before it was ready"
        self.close()
        return why

    def run(self, call: NodeCall, gpus: tuple[int, ...], timeout_s: float | None) -> Ran:
        """Run ``call`` in a child of the fork server that sees ``gpus``; killed after ``timeout_s`` seconds."""
        if not self.ready:
            return run_in_child(call, gpus, timeout_s)
        try:
            conn, output = self._ask(call, gpus)
        except OSError as exc:
            return self._fresh_instead(call, gpus, timeout_s, f"it could not be reached ({exc})")
        try:
            heard = listen(conn, output, timeout_s)
        finally:
            conn.close()
            os.close(output)
        if heard.pid is None and heard.exit is None and not heard.timed_out:
            return self._fresh_instead(call, gpus, timeout_s, "it went away before the call started")
        return heard.outcome(call, timeout_s)

    def run_packaged(self, call: NodeCall, gpus: tuple[int, ...], package: Path) -> Ran:
        """Run a call of the shipped code package in ``package`` in a process of that package's server (a child of
        the fork server: fluksio/execution/package_server.py): one forked for it that sees ``gpus``, or, granted
        none, one of the server's runners (fluksio/execution/runners.py); that process keeps the timeout."""
        if not self.ready:
            return run_in_child(call, gpus, None, package=package)
        if not gpus:
            heard = Heard()
            body = json.dumps({"call": call.to_wire(), "gpus": []}).encode()
            try:
                self.kept.run(str(package), call.code_entry or "", body, heard)
            except OSError as exc:
                log.debug("no kept runner for %s (%s): the call asks the fork server", package, exc)
            else:
                return heard.outcome(call, None)
        try:
            conn, output = self._ask(call, gpus, package_header(package, call.code_entry or "", runner=not gpus))
        except OSError as exc:
            return self._fresh_instead(call, gpus, None, f"it could not be reached ({exc})", package)
        try:
            heard = listen(conn, output, None)
        finally:
            conn.close()
            os.close(output)
        if heard.pid is None and heard.exit is None:
            return self._fresh_instead(call, gpus, None, "it went away before the call started", package)
        return heard.outcome(call, None)

    def _ask(self, call: NodeCall, gpus: tuple[int, ...], header: bytes = REGISTERED) -> tuple[socket.socket, int]:
        """Hand the server this call's socket and output pipe (``header`` says which flows the call is of), then
        the call; this process's ends of both."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        read_end, write_end = os.pipe()
        try:
            socket.send_fds(self.control, [header], [theirs.fileno(), write_end])
            body = json.dumps({"call": call.to_wire(), "gpus": list(gpus)}).encode()
            mine.sendall(LENGTH.pack(len(body)) + body)
        except OSError:
            mine.close()
            os.close(read_end)
            raise
        finally:
            theirs.close()  # the server's and the child's alone: when the child is gone, the pipe ends
            os.close(write_end)
        return mine, read_end

    def _fresh_instead(self, call: NodeCall, gpus: tuple[int, ...], timeout_s: float | None, why: str,
                       package: Path | None = None) -> Ran:
        # The server does not come back: this process starts GPU calls fresh until the worker restarts.
        self.ready = False
        log.warning("GPU calls and shipped code packages in this worker process start in a fresh interpreter from "
                    "now on: its fork server is gone (%s); restart `fluksio worker` to have them start warm again",
                    why)
        return run_in_child(call, gpus, timeout_s, package=package)

    def close(self) -> None:
        """Stop the server (closing this end is its signal; its children go with it)."""
        self.ready = False
        self.control.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


@dataclass
class Heard:
    """What one call's socket and pipe said."""

    #: The child's pid, once it said it started.
    pid: int | None = None
    completion: Completion | None = None
    #: The child's exit code as the server saw it (negative: a signal); ``None``: the server never said.
    exit: int | None = None
    #: The call ran past its timeout and the server was asked to kill it.
    timed_out: bool = False
    output: bytearray = field(default_factory=bytearray)
    #: Bytes of output dropped from the front (over :data:`OUTPUT_LIMIT`).
    cut: int = 0

    def hear(self, line: bytes | bytearray) -> None:
        message = json.loads(line)
        if "started" in message:
            self.pid = int(message["started"])
        elif "completion" in message:
            self.completion = Completion.from_wire(message["completion"])
        elif "exit" in message:
            self.exit = int(message["exit"])

    def read_output(self, fd: int) -> bool:
        """Read what is there; ``False`` at the end of the pipe."""
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self.output += chunk
            if len(self.output) > OUTPUT_LIMIT:
                extra = len(self.output) - OUTPUT_LIMIT
                del self.output[:extra]
                self.cut += extra

    def text(self) -> str:
        text = self.output.decode(errors="replace").strip()
        return f"[… {self.cut} earlier bytes cut]\n{text}" if self.cut else text

    def outcome(self, call: NodeCall, timeout_s: float | None) -> Ran:
        """What the call made (:class:`NodeFailed` if it failed, timed out, or died)."""
        if self.completion is not None:
            return reported(self.completion, self.text())
        if self.timed_out:
            raise NodeFailed(f"node {call.node!r} timed out after {timeout_s:g} s", logs=self.text(),
                             error_types=error_types(TimeoutError()))
        if self.exit is None:
            raise NodeFailed(f"the fork server of machine {call.grant.machine} went away while node {call.node!r} "
                             f"ran{' on its GPUs' if call.grant.gpus else ''}", logs=self.text())
        if self.exit == -signal.SIGKILL:
            # As for a fresh interpreter (isolated.run_in_child): the server kills a child only when asked to, and
            # then the call has timed out or its pool process is gone; otherwise the OOM killer did, or kill -9.
            raise NodeFailed(f"out of memory: the process running node {call.node!r} was killed by SIGKILL (the "
                             "kernel's OOM killer, or kill -9)", logs=self.text(), oom=True)
        raise NodeFailed(f"the process running node {call.node!r} exited with code {self.exit} before reporting",
                         logs=self.text())


def listen(conn: socket.socket, output: int, timeout_s: float | None) -> Heard:
    """Read the call's socket and output until the server says the child is gone (or the socket ends); past
    ``timeout_s`` seconds, ask for the child to be killed and wait :data:`KILL_GRACE_S` for that."""
    heard = Heard()
    pending = bytearray()
    os.set_blocking(output, False)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    asked_to_kill = False
    with selectors.DefaultSelector() as selector:
        selector.register(conn, selectors.EVENT_READ, "conn")
        selector.register(output, selectors.EVENT_READ, "output")
        while heard.exit is None:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                if asked_to_kill:
                    break  # the server did not answer the kill: it is stuck or gone
                asked_to_kill = True
                heard.timed_out = heard.completion is None  # a call that reported is only slow to exit
                try:
                    conn.sendall(b"k")
                except OSError:
                    break
                deadline = time.monotonic() + KILL_GRACE_S
                continue
            for key, _ in selector.select(wait):
                if key.data == "output":
                    if not heard.read_output(output):
                        selector.unregister(output)
                    continue
                try:
                    chunk = conn.recv(1 << 16)
                except ConnectionError:
                    chunk = b""
                if not chunk:
                    heard.read_output(output)
                    return heard
                pending += chunk
                if b"\n" in chunk:
                    *lines, rest = pending.split(b"\n")
                    pending = bytearray(rest)
                    for line in lines:
                        heard.hear(line)
    heard.read_output(output)  # what is there now; a grandchild holding the pipe open is not waited for
    return heard
