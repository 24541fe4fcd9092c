"""The fork server: a process that imported fluksio and the installation's flows, never started CUDA, and
forks each GPU call of its worker, so that a call starts warm instead of in a fresh interpreter.

``python -m fluksio.execution.forkserver FD`` is started by a node worker (fluksio/execution/warm.py) before
its pool. ``FD`` is its end of a ``SOCK_SEQPACKET`` socket pair whose other end every pool process inherits.
It loads the settings and flows as a fresh interpreter would, checks that no flow module started CUDA at
import (fluksio/execution/cuda.py), says so in one message on that socket, and then serves requests.

A request is one message carrying two file descriptors (``socket.send_fds``): the server's end of a stream
socket private to this call, and the write end of a pipe the pool process reads the call's stdout and stderr
from. On the private socket the pool process sends the call (an 8-byte length, then JSON); the server forks
a child for it and from then on:

* the child sets ``CUDA_VISIBLE_DEVICES`` to its GPU ids before anything can touch CUDA, answers
  ``{"started": pid}``, runs the call and answers ``{"completion": …}`` (the completion a fresh
  interpreter would print);
* the server answers ``{"exit": code}`` once the child is gone (``code`` as :mod:`subprocess` gives it:
  negative for a signal), and closes the socket;
* anything the pool process sends, or its end closing — the pool process was killed (a cancel), or it gave
  up (a timeout) — makes the server SIGKILL the child at once.

Lifetimes: the server dies with its worker (``PR_SET_PDEATHSIG``) and when every worker-side end of the
pair is closed; each child dies with the server (``PR_SET_PDEATHSIG`` again). So a call dies with its worker,
with the pool process that asked for it, on its timeout and on a cancel, as a fresh interpreter did. The
server is one thread, which is what makes its ``fork()`` safe, and it never runs a call itself.

Why not :mod:`multiprocessing`'s forkserver: it pickles what it starts, preloads modules by name only (flows
are often files), lets its children outlive it and the process that asked, and its state does not carry over
into the prefork pool's processes. Why not the pool process itself: it runs CPU calls, which may start CUDA.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import logging
import os
import selectors
import signal
import socket
import struct
import sys
import traceback
from typing import Any

from fluksio.execution.cuda import cuda_in_use
from fluksio.execution.isolated import die_with_parent, run_reported
from fluksio.flows.registry import FlowRegistry
from fluksio.messages import NodeCall
from fluksio.runtime import Runtime
from fluksio.settings import Settings, load_settings

#: A request's length prefix: the JSON's size in bytes, big-endian.
LENGTH = struct.Struct("!Q")
#: Longest a pool process may take to send a request it announced, in seconds (it sends it at once).
REQUEST_TIMEOUT_S = 30.0
#: File descriptors one request carries: the call's socket and its output pipe.
REQUEST_FDS = 2

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


class ForkServer:
    """The serving loop: requests from the control socket, kills asked for on a call's socket, children reaped."""

    def __init__(self, control: socket.socket, settings: Settings, registry: FlowRegistry) -> None:
        self.control = control
        self.settings = settings
        self.registry = registry
        self.pid = os.getpid()
        self.selector = selectors.DefaultSelector()
        #: Child pid → the socket of the pool process that asked for it (open until the child is reaped).
        self.calls: dict[int, socket.socket] = {}
        # SIGCHLD wakes the selector through this pipe (Python runs the handler between bytecodes).
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    def serve(self) -> None:
        """Until every worker-side end of the control socket is closed; then the children go too."""
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # not SIG_IGN: children must stay reapable (waitpid)
        self.selector.register(self.control, selectors.EVENT_READ, "control")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "reap")
        while True:
            for key, _ in self.selector.select():
                if key.data == "control":
                    if not self.accept():
                        return
                elif key.data == "reap":
                    self.reap()
                else:
                    self.kill(key.data)

    def accept(self) -> bool:
        """Take one request off the control socket and fork its child; ``False`` once the worker is gone."""
        try:
            message, fds, _, _ = socket.recv_fds(self.control, 16, REQUEST_FDS)
        except InterruptedError:
            return True
        if not message and not fds:
            return False
        if len(fds) != REQUEST_FDS:
            for fd in fds:
                os.close(fd)
            return True
        conn, output = socket.socket(fileno=fds[0]), fds[1]
        try:
            conn.settimeout(REQUEST_TIMEOUT_S)
            body = read_exactly(conn, LENGTH.unpack(read_exactly(conn, LENGTH.size))[0])
            conn.settimeout(None)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
        except OSError as exc:  # the pool process went away mid-request, or no fork is possible now
            log.warning("fork server: a GPU call could not be started: %s", exc)
            conn.close()
            os.close(output)
            return True
        if pid == 0:
            self.child(conn, output, body)  # never returns
        os.close(output)
        self.calls[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        return True

    def kill(self, pid: int) -> None:
        """The pool process asked for its call to end (a timeout), or is gone (a cancel killed it)."""
        conn = self.calls[pid]
        self.selector.unregister(conn)
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
            conn = self.calls.pop(pid, None)
            if conn is None:
                continue
            try:
                self.selector.unregister(conn)
            except KeyError:
                pass  # its pool process asked for a kill already
            try:
                send_line(conn, {"exit": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass  # the pool process is gone
            conn.close()

    def child(self, conn: socket.socket, output: int, body: bytes) -> None:
        """In the forked child: become a process of this call alone, run it, report, exit."""
        code = 1
        try:
            die_with_parent()
            if os.getppid() != self.pid:  # the server died between the fork and the line above
                os._exit(1)
            self._shed()
            os.dup2(output, 1)
            os.dup2(output, 2)
            os.close(output)
            code = run_call(conn, body, self.settings, self.registry)
        except BaseException:  # noqa: BLE001 - the child must end here, whatever happened, and say why
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(code)

    def _shed(self) -> None:
        """Drop what the server holds and the call must not: other calls' sockets, the control socket, the
        server's signal handling, and the exit handlers of the server's modules (a temporary folder one of
        them made must outlive this child)."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.selector.close()
        for other in self.calls.values():
            other.close()
        self.control.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        atexit._clear()  # those the call registers itself run when it ends (run_call)


def run_call(conn: socket.socket, body: bytes, settings: Settings, registry: FlowRegistry) -> int:
    """Run the call ``body`` asks for in this (forked) process, reporting on ``conn``; the exit code."""
    request = json.loads(body)
    # Before anything else: CUDA reads the variable once, when it starts, and nothing here started it yet.
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(int(gpu)) for gpu in request["gpus"])
    send_line(conn, {"started": os.getpid()})
    call = NodeCall.from_wire(request["call"])
    runtime = Runtime.standalone(settings, registry)
    try:
        done = run_reported(runtime, call)
    finally:
        atexit._run_exitfuncs()  # what the node registered (a tracker flushing its run), as at an interpreter's end
        runtime.db.dispose()
    send_line(conn, {"completion": done.to_wire()})
    return 0


def warm_up(settings: Settings, registry: FlowRegistry) -> None:
    """Import now what every child would import again: the node-call code, and the run store's dialect (which
    SQLAlchemy imports when the first engine is made; none is connected here, and none is kept)."""
    importlib.import_module("fluksio.execution.call")
    Runtime.standalone(settings, registry).db.dispose()


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))  # (the worker set PR_SET_PDEATHSIG before the exec)
    # The worker decides when this process ends (its death, or closing its end): a Ctrl-C or a SIGTERM to the
    # whole process group must not end the calls the worker's warm shutdown is waiting for.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Its own handler, on its own logger: the root logger stays as bare as a fresh interpreter's, for the calls.
    said = logging.StreamHandler()
    said.setFormatter(logging.Formatter("[%(asctime)s: %(levelname)s/fork server] %(message)s"))
    log.addHandler(said)
    log.propagate = False
    try:
        settings = load_settings()
        registry = FlowRegistry()
        registry.load_sources(settings.flows)
    except Exception as exc:  # noqa: BLE001 - told to the worker, which starts its GPU calls fresh instead
        send_line(control, {"failed": f"{type(exc).__name__}: {exc}"})
        return
    reason = cuda_in_use()
    if reason is not None:
        send_line(control, {"cuda": reason})
        return
    warm_up(settings, registry)
    # Objects that exist now are never collected: the collector would otherwise write to every page of
    # them in each child, copying what the fork shares.
    gc.collect()
    gc.freeze()
    send_line(control, {"ready": os.getpid(), "flows": registry.names()})
    ForkServer(control, settings, registry).serve()


if __name__ == "__main__":
    main()
