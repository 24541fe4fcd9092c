"""Forking one child per call: the serving loop of the fork server (fluksio/execution/forkserver.py, which
says the protocol) and of each package server it forks (fluksio/execution/package_server.py).

A process that runs this loop imported fluksio and its flows (the installation's, or one code package's) and
never started CUDA. It takes requests off its control socket, forks a child per call, kills a child whose
pool process asks for it (or goes away), reaps children and says how each ended. It is one thread, which is
what makes its ``fork()`` safe, and it never runs a call itself. A package server's loop also has
*runners* (fluksio/execution/runners.py): processes it forked once that run its calls granted no GPUs one
after another, which it hands such a call to instead of forking one; it watches their calls' sockets and
reaps them as it does its children.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import selectors
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fluksio.execution.isolated import die_with_parent, run_reported
from fluksio.flows.registry import FlowRegistry
from fluksio.messages import Completion, NodeCall
from fluksio.runtime import Runtime
from fluksio.settings import Settings

if TYPE_CHECKING:
    from fluksio.execution.runners import Runners

#: A request's length prefix: the JSON's size in bytes, big-endian.
LENGTH = struct.Struct("!Q")
#: Longest a pool process may take to send a request it announced, in seconds (it sends it at once).
REQUEST_TIMEOUT_S = 30.0
#: File descriptors one request carries: the call's socket and its output pipe.
REQUEST_FDS = 2
#: What a request's message on the control socket says for a call of the flows the server loaded; a call of
#: a shipped code package says instead which package (JSON: ``{"package": folder, "entry": …}``).
REGISTERED = b"call"
#: The longest message on the control socket, in bytes (a package's folder is a path).
HEADER_BYTES = 1 << 16

#: Runs a call in the forked child: how it ended, as a completion.
Runner = Callable[[Runtime, NodeCall], Completion]
#: Hands a request that names a code package (its header, and the two descriptors it carries) on to that
#: package's server; it owns the descriptors from then on.
Route = Callable[[bytes, list[int]], None]

log = logging.getLogger(__name__)


def send_line(sock: socket.socket, message: dict[str, Any]) -> None:
    """One JSON message and a newline, in one ``sendall``."""
    sock.sendall(json.dumps(message).encode() + b"\n")


def read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ConnectionError(f"the request ended after {len(chunks)} of {size} bytes")
        chunks += chunk
    return bytes(chunks)


def forked(parent: int, become: Callable[[], int]) -> int:
    """Fork a process that dies with this one (``parent``: this process's pid) and becomes ``become()``; its pid.

    In the child this never returns: ``become``'s result is its exit code, and whatever it raises is printed
    (its stderr is where its caller reads why) and ends it with 1. Buffered output is flushed first, so that
    nothing written before the fork is written twice.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid != 0:
        return pid
    code = 1
    try:
        die_with_parent()
        if os.getppid() != parent:  # the parent died between the fork and the line above
            os._exit(1)
        code = become()
    except BaseException:  # noqa: BLE001 - the child must end here, whatever happened, and say why
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


class ForkServer:
    """The serving loop: requests from the control socket, kills asked for on a call's socket, children reaped.

    ``run`` runs a call in its child (by default as a fresh interpreter would); ``route`` takes the requests
    that name a code package (none: every request is this server's own, as in a package server, to which the
    fork server hands on only its package's requests). With ``drain``, the end of the control socket stops
    only the taking of requests: the loop goes on until its last child is reaped (a package server that is
    stopped lets its calls finish). ``runners`` (a package server's): where its calls granted no GPUs run.
    """

    def __init__(self, control: socket.socket, settings: Settings, registry: FlowRegistry, *,
                 run: Runner = run_reported, route: Route | None = None, drain: bool = False) -> None:
        self.control = control
        self.settings = settings
        self.registry = registry
        self.run = run
        self.route = route
        self.drain = drain
        self.pid = os.getpid()
        self.selector = selectors.DefaultSelector()
        #: Child pid → the socket of the pool process that asked for it (open until the child is reaped).
        self.calls: dict[int, socket.socket] = {}
        #: Whether requests are still taken off the control socket.
        self.taking = True
        #: A package server's runners (set once it is made): its calls granted no GPUs run there.
        self.runners: Runners | None = None
        # SIGCHLD wakes the selector through this pipe (Python runs the handler between bytecodes).
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    def serve(self) -> None:
        """Until every worker-side end of the control socket is closed; then the children go too (with
        ``drain``: once they are gone)."""
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # not SIG_IGN: children must stay reapable (waitpid)
        self.selector.register(self.control, selectors.EVENT_READ, "control")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "reap")
        runners = self.runners
        while self.taking or (self.drain and (self.calls or (runners is not None and runners.busy()))):
            for key, _ in self.selector.select(None if runners is None else runners.wait_s()):
                if key.data == "control":
                    if not self.accept():
                        self.taking = False
                        self.selector.unregister(self.control)
                        if runners is not None:
                            runners.stop()
                        if not self.drain:
                            return
                elif key.data == "reap":
                    self.reap()
                elif callable(key.data):
                    key.data()  # a runner's word, or its call's socket (fluksio/execution/runners.py)
                else:
                    self.kill(key.data)
            if runners is not None:
                runners.tick()

    def accept(self) -> bool:
        """Take one request off the control socket and fork its child (or hand it to a runner); ``False`` once the
        worker is gone."""
        try:
            message, fds, _, _ = socket.recv_fds(self.control, HEADER_BYTES, REQUEST_FDS)
        except InterruptedError:
            return True
        if not message and not fds:
            return False
        if len(fds) != REQUEST_FDS:
            for fd in fds:
                os.close(fd)
            return True
        if message != REGISTERED and self.route is not None:
            self.route(message, fds)
            return True
        if self.runners is not None and self.runners.keep_asked(message):
            self.runners.keep(socket.socket(fileno=fds[0]), fds[1])  # its lifeline and channel: no call body
            return True
        conn, output = socket.socket(fileno=fds[0]), fds[1]
        try:
            conn.settimeout(REQUEST_TIMEOUT_S)
            body = read_exactly(conn, LENGTH.unpack(read_exactly(conn, LENGTH.size))[0])
            conn.settimeout(None)
            if self.runners is not None and self.runners.wanted(message) and self.runners.take(conn, output, body):
                return True
            pid = forked(self.pid, lambda: self.child(conn, output, body))
        except OSError as exc:  # the pool process went away mid-request, or no fork is possible now
            log.warning("a call could not be started: %s", exc)
            conn.close()
            os.close(output)
            return True
        os.close(output)
        self.calls[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        return True

    def kill(self, pid: int) -> None:
        """The pool process asked for its call to end (a timeout), or is gone (a cancel killed it)."""
        conn = self.calls.get(pid)
        if conn is None:
            return  # reaped already, earlier in the same round of events
        try:
            self.selector.unregister(conn)
        except KeyError:
            return  # asked already
        try:
            os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid is still this child's
        except ProcessLookupError:
            pass

    def reap(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.runners is not None and self.runners.reaped(pid, status):
                continue
            conn = self.calls.pop(pid, None)
            if conn is None:
                continue  # not a call's child: a package server (the fork server forks those too)
            try:
                self.selector.unregister(conn)
            except KeyError:
                pass  # its pool process asked for a kill already
            try:
                send_line(conn, {"exit": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass  # the pool process is gone
            conn.close()

    def child(self, conn: socket.socket, output: int, body: bytes) -> int:
        """In the forked child: become a process of this call alone, run it and report; its exit code."""
        self.shed()
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        return run_call(conn, body, self.settings, self.registry, self.run)

    def shed(self) -> None:
        """In a child (or a runner): drop what the server holds and the child must not: other calls' sockets, the
        runners' sockets, the control socket, the server's signal handling, and the exit handlers of the server's
        modules (a temporary folder one of them made must outlive this child)."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.selector.close()
        for other in self.calls.values():
            other.close()
        if self.runners is not None:
            self.runners.shed()
        self.control.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        atexit._clear()  # those the call registers itself run when it ends (run_call)


def run_call(conn: socket.socket, body: bytes, settings: Settings, registry: FlowRegistry,
             run: Runner = run_reported) -> int:
    """Run the call ``body`` asks for in this (forked) process, reporting on ``conn``; the exit code."""
    request = json.loads(body)
    # Before anything else: CUDA reads the variable once, when it starts, and nothing here started it yet.
    # No GPUs granted: the empty list, so that the call sees none rather than all of the machine's.
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(int(gpu)) for gpu in request["gpus"])
    send_line(conn, {"started": os.getpid()})
    call = NodeCall.from_wire(request["call"])
    runtime = Runtime.standalone(settings, registry)
    try:
        done = run(runtime, call)
    finally:
        atexit._run_exitfuncs()  # what the node registered (a tracker flushing its run), as at an interpreter's end
        runtime.db.dispose()
    send_line(conn, {"completion": done.to_wire()})
    return 0
