"""Package servers: children of the fork server, one per shipped code package, each running that package's calls.

A package's modules cannot live in the fork server (it holds ``FLUKSIO_FLOWS``, and two versions of one
module cannot share a process), so the first call of a package makes the fork server fork a *package
server* for it: a process that has fluksio imported already (and never started CUDA), forgets the
installation's flow modules, puts the package folder first on ``sys.path``, imports the package's entry
and then serves that package's calls as the fork server serves registered ones (fluksio/execution/forking.py).
A call granted GPUs gets a child of its own with ``CUDA_VISIBLE_DEVICES`` from its grant; a call granted
none goes to one of the server's *runners* (fluksio/execution/runners.py): a process forked from it once that
runs the package's CPU calls one after another, as a pool process runs registered ones, so that later calls
of a package cost no fork and no new runtime (forked per call again when all runners are busy). Either way the
call's process is killed when its pool process asks or goes away, and its report and exit code are said on
the call's socket. It keeps each node's ``timeout_s`` itself, since no process above it imported the node.

The fork server hands each package request (the header naming the package, and the call's two
descriptors) to the package's server as it came, starting the server if there is none; requests wait in the
server's socket while it imports. A package that fails to import leaves a server that answers each of its
calls with why, in one line. At most :data:`MAX_PACKAGE_SERVERS` are kept: past that, the one asked least
recently is told to stop, and stops once its running calls have ended (its runners with it). A package server
dies with the fork server (``PR_SET_PDEATHSIG``), hence with the worker, and its calls and runners with it.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from fluksio.execution.code_cache import hold
from fluksio.execution.cuda import cuda_in_use
from fluksio.execution.forking import ForkServer, forked
from fluksio.execution.isolated import run_reported
from fluksio.execution.runners import Runners
from fluksio.execution.shipped import LoadedPackage, forget_modules, load_package
from fluksio.settings import Settings

#: Package servers one fork server keeps at once; past it, the one asked for least recently stops.
MAX_PACKAGE_SERVERS = 8
#: How long a stopping fork server waits for its package servers to let their runners go, in seconds (the
#: worker waits 5 s for the fork server).
STOP_WAIT_S = 4.0

log = logging.getLogger(__name__)


@dataclass
class _Server:
    """A running package server, as the fork server knows it."""

    pid: int
    #: The fork server's end of its control socket: closing it tells the server to stop.
    control: socket.socket
    #: When it was last handed a request (monotonic seconds).
    used: float


def package_header(folder: Path, entry: str, runner: bool = False) -> bytes:
    """What a pool process sends on the fork server's control socket for a call of the package in ``folder``;
    ``runner``: the call is granted no GPUs, and may run in one of the package server's runners."""
    asked: dict[str, object] = {"package": str(folder), "entry": entry}
    if runner:
        asked["runner"] = True
    return json.dumps(asked).encode()


class PackageServers:
    """The fork server's package servers, by package folder and entry (:meth:`route` is its ``route``).

    ``flow_modules``: the modules the fork server imported for ``FLUKSIO_FLOWS``, which a package server
    forgets; ``shed``: drops, in a forked child, what the fork server holds (its control socket, its calls'
    sockets, its signal handling).
    """

    def __init__(self, settings: Settings, flow_modules: list[str], shed: Callable[[], None],
                 keep: int = MAX_PACKAGE_SERVERS) -> None:
        self.settings = settings
        self.flow_modules = flow_modules
        self.shed = shed
        self.keep = keep
        self.servers: dict[tuple[str, str], _Server] = {}

    def route(self, header: bytes, fds: list[int]) -> None:
        """Hand the request on to its package's server, starting one if there is none (or it died)."""
        try:
            try:
                asked = json.loads(header)
                key = (str(asked["package"]), str(asked["entry"]))
            except (ValueError, KeyError, TypeError):
                log.warning("a request named no code package: %.200r", header)
                return  # its descriptors closed below: its pool process hears the server is gone
            for _attempt in range(2):
                try:
                    server = self.servers.get(key) or self._start(*key, fds)
                except OSError as exc:  # no fork possible now: its pool process hears the server is gone
                    log.warning("no package server could be started for %s: %s", key[0], exc)
                    return
                try:
                    socket.send_fds(server.control, [header], fds)
                except OSError:  # it died (a crash while importing, say): a fresh one gets the request
                    self._forget(key)
                    continue
                server.used = time.monotonic()
                break
            self._keep_fewest(key)
        finally:
            for fd in fds:
                os.close(fd)  # the package server holds its own copies now

    def _start(self, folder: str, entry: str, request: list[int]) -> _Server:
        """Fork the server of the package in ``folder``; ``request``: the descriptors of the request being routed
        (the new server gets its own copies of them through its socket, like any other)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

        def become() -> int:
            self.shed()
            # Like the fork server, it outlives a Ctrl-C or SIGTERM to the process group: the worker's warm
            # shutdown waits for its calls, and its end (the fork server's) is its signal to stop.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            for server in self.servers.values():
                server.control.close()
            for fd in request:
                os.close(fd)
            ours.close()
            serve_package(theirs, self.settings, Path(folder), entry, self.flow_modules)
            return 0

        try:
            pid = forked(os.getpid(), become)
        except OSError:
            ours.close()
            theirs.close()
            raise
        theirs.close()
        server = _Server(pid, ours, time.monotonic())
        self.servers[(folder, entry)] = server
        log.info("package server %d started for %s (%s)", pid, folder, entry)
        return server

    def stop_all(self, wait_s: float = STOP_WAIT_S) -> None:
        """The worker is stopping: every package server stops taking calls and lets its runners go (each runs
        the exit handlers its calls registered); wait up to ``wait_s`` for them to be gone. Any still there
        then dies with the fork server."""
        pids = [server.pid for server in self.servers.values()]
        for key in list(self.servers):
            self._forget(key)  # its end of the control socket: the server drains, then exits
        deadline = time.monotonic() + wait_s
        for pid in pids:
            while time.monotonic() < deadline:
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        break
                except ChildProcessError:
                    break
                time.sleep(0.01)  # a few milliseconds: its runners exit as soon as they are let go

    def _forget(self, key: tuple[str, str]) -> None:
        server = self.servers.pop(key, None)
        if server is not None:
            server.control.close()

    def _keep_fewest(self, asked: tuple[str, str]) -> None:
        """Stop the least recently asked servers beyond :attr:`keep` (never the one just asked); each stops
        taking requests now and exits once its running calls have ended."""
        while len(self.servers) > self.keep:
            key = min((k for k in self.servers if k != asked), key=lambda k: self.servers[k].used)
            log.info("package server %d for %s stops: more than %d packages in use", self.servers[key].pid, key[0],
                     self.keep)
            self._forget(key)


def serve_package(control: socket.socket, settings: Settings, folder: Path, entry: str,
                  flow_modules: list[str]) -> None:
    """In the forked package server: forget the installation's flows, import the package, serve its calls."""
    forget_modules(flow_modules)
    hold(folder)  # its files stay in the code cache while this server (and what it forks) may import from them
    package = load_package(folder, entry)
    reason = cuda_in_use()
    if reason is not None and package.failure is None:
        # Its children could neither be given their own GPUs nor use CUDA at all: refused, said why.
        package = LoadedPackage(folder, entry, package.registry,
                                f"{reason} once it is imported: a module starts CUDA at import time, and a process "
                                "that started CUDA cannot be forked for a call; start CUDA inside the node functions "
                                "(or set FLUKSIO_GPU_FORK_SERVER=false for fresh interpreters)")
    if package.failure is not None:
        log.warning("package server %d: %s (%s) failed to import: %s", os.getpid(), folder, entry, package.failure)
    # As in the fork server: what exists now is never collected, so a child's collector copies none of it.
    gc.collect()
    gc.freeze()
    server = ForkServer(control, settings, package.registry, run=partial(run_reported, package=package), drain=True)
    # As many runners as the worker's pool runs calls at once (its cpus): more would never all be busy.
    server.runners = Runners(server, settings.cpus or os.cpu_count() or 1)
    server.serve()
