"""Runners: long-lived processes of a package server (fluksio/execution/package_server.py) that run its CPU
calls one at a time, in-process, as a pool process runs registered ones, instead of a fork per call.

A call granted no GPUs needs no process of its own: nothing has to be set before CUDA starts. So a package
server hands such a call to one of its *runners*: a process forked from it once (it has the package imported
already, and never started CUDA), which builds its runtime (run store, artifact store) once and then runs one
call after another. A call granted GPUs is still forked on its own (fluksio/execution/forking.py), with
``CUDA_VISIBLE_DEVICES`` from its grant; a runner's is empty for good, so its calls see no GPU.

The protocol the pool process sees is the one a forked child speaks (fluksio/execution/forkserver.py):
``{"started": pid}`` (the runner's pid, the same for each call it runs), ``{"completion": …}``, then
``{"exit": 0}`` from the server once the runner is done with the call. The server hands a runner the call's
two descriptors and body on the runner's own socket; for the call's length the runner's stdout and stderr are
the call's output pipe, and it closes its copy before it says it is done, so the pool process reads all of the
call's output. The server keeps watching the call's socket meanwhile, so the guarantees of a forked child hold:

* a cancel (the pool process killed: its end closes) or a kill asked for SIGKILLs the runner; its call ends
  with it, the server says the runner's exit on the call's socket, and the next call gets another runner;
* a node's ``timeout_s`` is kept in the runner (run_here.py: the call runs on a thread it gives up on); a
  runner that gave up on a call's thread, or failed inside fluksio, reports the call and exits, never runs
  another;
* a runner dies with its package server (``PR_SET_PDEATHSIG``), hence with the worker;
* a runner only ever imports its own package: each package server has its own runners.

As many runners as calls of the package run at once, up to ``most`` (the worker's cpus: its pool never runs
more calls at once); past that, a call is forked as before.

A pool process may also *keep* a runner (fluksio/execution/kept.py): it asks once, with a *lifeline* socket and
a *channel*, and from then on hands the package's calls to that runner over the channel itself, with no hop
through the fork server or the package server. The server hands the channel to a runner of its own and then
only watches the lifeline: its end (the pool process died: a cancel) or a ``k`` on it kills the runner, a
``q`` lets it go gently; once the runner is reaped, its exit is said on the lifeline. Such a runner is the
pool process's alone for its life; it exits when its channel ends, its server lets go of it, or it is idle for
:data:`IDLE_S`. A runner idle for :data:`IDLE_S` exits, and so do
all of them once their package server stops taking calls; one told to go that has not gone within
:data:`GRACE_S` is killed. A runner runs the exit handlers its calls registered when it ends (a forked child
runs them after its one call).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from fluksio.execution.forking import (
    LENGTH,
    REQUEST_FDS,
    REQUEST_TIMEOUT_S,
    ForkServer,
    Runner,
    forked,
    read_exactly,
    send_line,
)
from fluksio.execution.run_here import NODE_THREAD
from fluksio.flows.registry import FlowRegistry
from fluksio.messages import NodeCall
from fluksio.runtime import Runtime
from fluksio.settings import Settings

#: A runner idle this long exits, in seconds (the next call of its package starts another).
IDLE_S = 300.0
#: How long a runner told to go has to exit before it is killed, in seconds (its calls' exit handlers run).
GRACE_S = 10.0
#: What a runner says on its socket after each call: done, and ready for another; or done, and exiting.
DONE, RETIRING = b"d", b"r"
#: What a pool process says on a kept runner's lifeline: kill it now (its call must end); let it go gently.
KILL, QUIT = b"k", b"q"
#: A kept runner's exit code when it left between two calls: a call sent to it meanwhile never started.
UNTAKEN = 75

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Runner:
    """A runner, as its package server knows it."""

    pid: int
    #: The server's end of the runner's socket; ``None`` once the runner was let go.
    sock: socket.socket | None
    #: The socket of the call it runs now (the pool process's), ``None`` while it is idle.
    conn: socket.socket | None = None
    #: When it last became idle (monotonic seconds).
    idle_since: float = 0.0
    #: When it is killed if it has not exited by then: set once it was let go.
    deadline: float | None = None
    #: Kept by a pool process: ``conn`` is then that process's lifeline, for the runner's whole life.
    kept: bool = False


class Runners:
    """The runners of one package server: ``server`` is its serving loop, whose selector, settings, flows and
    call runner they use; at most ``most`` at once."""

    def __init__(self, server: ForkServer, most: int, idle_s: float = IDLE_S) -> None:
        self.server = server
        self.most = max(1, most)
        self.idle_s = idle_s
        #: Every runner not reaped yet, by pid.
        self.runners: dict[int, _Runner] = {}
        #: The idle ones, the most recently used last.
        self.idle: list[_Runner] = []

    @staticmethod
    def wanted(header: bytes) -> bool:
        """Whether the request's header asks for a runner (a call granted no GPUs)."""
        try:
            return json.loads(header).get("runner") is True
        except (ValueError, AttributeError):
            return False

    @staticmethod
    def keep_asked(header: bytes) -> bool:
        """Whether the request asks for a runner the pool process keeps (its two descriptors: lifeline, channel)."""
        try:
            return json.loads(header).get("keep") is True
        except (ValueError, AttributeError):
            return False

    def keep(self, lifeline: socket.socket, channel: int) -> None:
        """Give a runner to the pool process that sent ``lifeline`` and ``channel``, for good: the runner serves
        calls on ``channel``; this server watches ``lifeline``. If none can be given, both are closed (the pool
        process hears the channel end before any call started, and asks the usual way instead)."""
        runner = None
        try:
            runner = self.idle.pop() if self.idle else self._start()
            assert runner.sock is not None  # an idle or new runner was not let go
            socket.send_fds(runner.sock, [LENGTH.pack(0)], [channel])
        except OSError as exc:
            log.warning("no runner could be kept: %s", exc)
            if runner is not None:
                self._kill(runner)
            lifeline.close()
            return
        finally:
            os.close(channel)
        runner.kept, runner.conn = True, lifeline
        self.server.selector.register(lifeline, selectors.EVENT_READ, partial(self._lifeline, runner, lifeline))

    def _lifeline(self, runner: _Runner, lifeline: socket.socket) -> None:
        """The pool process that keeps ``runner`` said something, or is gone: a cancel kills the runner."""
        try:
            said = lifeline.recv(1)
        except OSError:
            said = b""
        if runner.conn is not lifeline:
            return
        if said == QUIT:
            self.server.selector.unregister(lifeline)  # its exit is still said there once it is reaped
            self._let_go(runner)
        else:
            self._kill(runner)

    def take(self, conn: socket.socket, output: int, body: bytes) -> bool:
        """Hand the call to an idle runner, or a new one; ``False`` when all ``most`` are busy (or none can be
        started): the server forks the call instead. Once taken, the server's copy of ``output`` is closed."""
        while True:
            runner = self.idle.pop() if self.idle else None
            if runner is None and len(self.runners) < self.most:
                try:
                    runner = self._start()
                except OSError as exc:
                    log.warning("no runner could be started: %s", exc)
                    return False
            if runner is None or runner.sock is None:
                return False
            try:
                socket.send_fds(runner.sock, [LENGTH.pack(len(body))], [conn.fileno(), output])
                runner.sock.sendall(body)
            except OSError:  # it died meanwhile (or is stuck): never handed another call
                self._kill(runner)
                continue
            break
        os.close(output)
        runner.conn = conn
        self.server.selector.register(conn, selectors.EVENT_READ, partial(self._cancel, runner, conn))
        return True

    def _start(self) -> _Runner:
        """Fork a runner from the package server."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

        def become() -> int:
            self.server.shed()  # other runners' sockets and calls too (shed below)
            # Like its server, it outlives a SIGTERM or Ctrl-C to the process group (a service manager stops the
            # worker so): the worker's warm shutdown waits for its calls, and its server or pool process says when
            # it goes. A handler that does nothing rather than SIG_IGN, which a node's subprocesses would inherit.
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, _carry_on)
            ours.close()
            return serve_calls(theirs, self.server.settings, self.server.registry, self.server.run)

        try:
            pid = forked(self.server.pid, become)
        except OSError:
            ours.close()
            theirs.close()
            raise
        theirs.close()
        ours.settimeout(REQUEST_TIMEOUT_S)  # an idle runner reads at once; one that does not is stuck
        runner = _Runner(pid, ours)
        self.runners[pid] = runner
        self.server.selector.register(ours, selectors.EVENT_READ, partial(self._heard, runner))
        return runner

    def _heard(self, runner: _Runner) -> None:
        """The runner said it is done with its call (or its socket ended: it died, and its reaping says how)."""
        if runner.sock is None:
            return
        try:
            said = runner.sock.recv(1)
        except OSError:
            said = b""
        if not said:
            self._let_go(runner)
            return
        conn, runner.conn = runner.conn, None
        if conn is not None:
            _end_call(self.server.selector, conn, 0)
        if said == DONE and self.server.taking and runner.deadline is None:
            runner.idle_since = time.monotonic()
            self.idle.append(runner)
        else:
            self._let_go(runner)  # it exits (RETIRING), or is told to (the server stops taking calls)

    def _cancel(self, runner: _Runner, conn: socket.socket) -> None:
        """The pool process asked for its call to end, or is gone (a cancel killed it): the runner goes too."""
        if runner.conn is conn:
            self._kill(runner)

    def _kill(self, runner: _Runner) -> None:
        if runner.conn is not None:
            try:
                self.server.selector.unregister(runner.conn)  # its exit is said once it is reaped
            except KeyError:
                pass
        self._let_go(runner)
        try:
            os.kill(runner.pid, signal.SIGKILL)  # not reaped yet, so the pid is still this runner's
        except ProcessLookupError:
            pass

    def _let_go(self, runner: _Runner) -> None:
        """Close the server's end of the runner's socket (an idle runner exits when it sees that); it is killed
        if it is still there after :data:`GRACE_S`."""
        if runner in self.idle:
            self.idle.remove(runner)
        if runner.sock is not None:
            try:
                self.server.selector.unregister(runner.sock)
            except KeyError:
                pass
            runner.sock.close()
            runner.sock = None
        if runner.deadline is None:
            runner.deadline = time.monotonic() + GRACE_S

    def reaped(self, pid: int, status: int) -> bool:
        """The runner ``pid`` is gone: its call, if it had one, hears how it ended. ``False``: not a runner."""
        runner = self.runners.pop(pid, None)
        if runner is None:
            return False
        self._let_go(runner)
        conn, runner.conn = runner.conn, None
        if conn is not None:
            _end_call(self.server.selector, conn, os.waitstatus_to_exitcode(status))
        return True

    def busy(self) -> bool:
        """Whether any runner is still there (a server that stops waits for them)."""
        return bool(self.runners)

    def stop(self) -> None:
        """The server takes no more calls: idle runners go now, busy ones once their call is done (kept ones too:
        between two calls, they see that they were let go)."""
        while self.idle:
            self._let_go(self.idle.pop())
        for runner in list(self.runners.values()):
            if runner.kept:
                self._let_go(runner)

    def wait_s(self) -> float | None:
        """Seconds until :meth:`tick` has something to do (``None``: nothing to wait for)."""
        times = [r.idle_since + self.idle_s for r in self.idle]
        times += [r.deadline for r in self.runners.values() if r.deadline is not None]
        return max(0.0, min(times) - time.monotonic()) if times else None

    def tick(self) -> None:
        """Let go of runners idle for too long; kill those let go that did not exit in time."""
        now = time.monotonic()
        for runner in [r for r in self.idle if now - r.idle_since >= self.idle_s]:
            self._let_go(runner)
        for runner in list(self.runners.values()):
            if runner.deadline is not None and now >= runner.deadline:
                runner.deadline = now + GRACE_S  # reaped soon; not killed again before then
                try:
                    os.kill(runner.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def shed(self) -> None:
        """In a child of the server: close the server's ends of the runners' sockets and their calls'."""
        for runner in self.runners.values():
            for held in (runner.sock, runner.conn):
                if held is not None:
                    held.close()


def _carry_on(*_: object) -> None:
    """A runner's SIGTERM and SIGINT: nothing (see :meth:`Runners._start`)."""


def _end_call(selector: selectors.BaseSelector, conn: socket.socket, code: int) -> None:
    """Tell the pool process the call's process is done with it (``code``: how it exited), and let go of it."""
    try:
        selector.unregister(conn)
    except KeyError:
        pass  # its pool process asked for a kill already
    try:
        send_line(conn, {"exit": code})
    except OSError:
        pass  # the pool process is gone
    conn.close()


def serve_calls(sock: socket.socket, settings: Settings, registry: FlowRegistry, run: Runner) -> int:
    """In a runner: run the calls the server hands on ``sock``, one at a time, until it lets go; the exit code.
    Its runtime is built once, in its first call (a failure to build it is that call's, in its logs)."""
    # No call it runs is granted a GPU: none of the machine's is visible to any of them.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    saved = (os.dup(1), os.dup(2))  # where the runner writes between calls: its server's stdout and stderr
    built: list[Runtime] = []

    def runtime() -> Runtime:
        if not built:
            built.append(Runtime.standalone(settings, registry))
        return built[0]

    try:
        while True:
            header, fds, _, _ = socket.recv_fds(sock, LENGTH.size, REQUEST_FDS)
            if header == LENGTH.pack(0) and len(fds) == 1:  # kept by a pool process from now on
                return serve_channel(socket.socket(fileno=fds[0]), sock, runtime, run, saved)
            if not header or len(header) != LENGTH.size or len(fds) != REQUEST_FDS:
                for fd in fds:
                    os.close(fd)
                return 0 if not header else 1  # let go (its end closed), or a request it cannot read
            body = read_exactly(sock, LENGTH.unpack(header)[0])
            clean = run_one(socket.socket(fileno=fds[0]), fds[1], body, runtime, run, saved)
            sock.sendall(DONE if clean else RETIRING)
            if not clean:
                return 0
    finally:
        atexit._run_exitfuncs()  # what its calls registered (a tracker flushing its run), as at an interpreter's end
        for made in built:
            made.db.dispose()


def serve_channel(channel: socket.socket, server: socket.socket, runtime: Callable[[], Runtime], run: Runner,
                  saved: tuple[int, int]) -> int:
    """In a kept runner: run the calls its pool process sends on ``channel`` (each: a length, then the body; the
    first also carries the pipe all of its calls write their output to), until the channel ends, its ``server``
    lets go, or it is idle for :data:`IDLE_S`. Leaving between two calls, it exits with :data:`UNTAKEN`: a call
    its pool process sent meanwhile was not read, and is asked of another runner."""
    output: int | None = None
    try:
        with channel, selectors.DefaultSelector() as selector:
            selector.register(channel, selectors.EVENT_READ, "channel")
            selector.register(server, selectors.EVENT_READ, "server")
            while True:
                ready = [key.data for key, _ in selector.select(IDLE_S)]
                if not ready or "server" in ready:
                    return UNTAKEN  # idle too long, or let go
                header, fds, _, _ = socket.recv_fds(channel, LENGTH.size, 1)
                if fds:
                    if output is not None:
                        os.close(output)
                    output = fds[0]
                if not header or len(header) != LENGTH.size or output is None:
                    return UNTAKEN if not header else 1
                body = read_exactly(channel, LENGTH.unpack(header)[0])
                if not run_one(channel, output, body, runtime, run, saved, kept=True):
                    return 0
    finally:
        if output is not None:
            os.close(output)


def run_one(conn: socket.socket, output: int, body: bytes, runtime: Callable[[], Runtime], run: Runner,
            saved: tuple[int, int], kept: bool = False) -> bool:
    """Run one call in this runner, its output on ``output``, reporting on ``conn``; whether the runner may run
    another (not when it gave up on the call's thread: the call ran past its timeout and may still be running).

    ``kept``: for a pool process that keeps this runner, ``conn`` and ``output`` are its for good (neither is
    closed), it is not told ``started`` (what it sent is taken), and the completion says whether the runner
    takes another call (``again``)."""
    again = False
    try:
        _flush()
        os.dup2(output, 1)
        os.dup2(output, 2)
        if not kept:
            os.close(output)
        try:
            request = json.loads(body)
            if request["gpus"]:
                raise ValueError("a runner runs calls granted no GPUs")
            if not kept:
                send_line(conn, {"started": os.getpid()})
            done = run(runtime(), NodeCall.from_wire(request["call"]))
        except BaseException:
            traceback.print_exc()  # into the call's output: its logs
            raise
        finally:
            _flush()
            os.dup2(saved[0], 1)  # the call's pipe is closed here now (or only this runner's own copy is left)
            os.dup2(saved[1], 2)
        again = not any(thread.name.startswith(NODE_THREAD) and thread.is_alive() for thread in threading.enumerate())
        send_line(conn, {"completion": done.to_wire(), "again": again} if kept else {"completion": done.to_wire()})
    finally:
        if not kept:
            conn.close()
    return again


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
