"""The fork server: a process that imported fluksio and the installation's flows, never started CUDA, and
forks each GPU call of its worker, so that a call starts warm instead of in a fresh interpreter; and runs
each call of a shipped code package, through that package's server.

``python -m fluksio.execution.forkserver FD`` is started by a node worker (fluksio/execution/warm.py) before
its pool. ``FD`` is its end of a ``SOCK_SEQPACKET`` socket pair whose other end every pool process inherits.
It loads the settings and flows as a fresh interpreter would, checks that no flow module started CUDA at
import (fluksio/execution/cuda.py), says so in one message on that socket, and then serves requests.

A request is one message carrying two file descriptors (``socket.send_fds``): the server's end of a stream
socket private to this call, and the write end of a pipe the pool process reads the call's stdout and stderr
from. The message itself is ``call`` for a call of the flows the server loaded, or names a code package
(``{"package": folder, "entry": …}``): such a request goes on, as it came, to that package's server, a child
of this one that imported the package instead of the installation's flows and serves its calls just as this
server serves the others (fluksio/execution/package_server.py), except that a call granted no GPUs (the
message says ``"runner": true``) runs in one of its runners, which speak to the pool process as a child does
(fluksio/execution/runners.py). A pool process may instead ask to *keep* a runner (``"keep": true``, the two
descriptors then a lifeline and a channel): it hands its later calls of the package to that runner directly
(fluksio/execution/kept.py). On the private socket the pool process sends the call (an 8-byte length,
then JSON); the server forks a child for it and from then on:

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
server is one thread, which is what makes its ``fork()`` safe, and it never runs a call itself (its loop is
fluksio/execution/forking.py).

Why not :mod:`multiprocessing`'s forkserver: it pickles what it starts, preloads modules by name only (flows
are often files), lets its children outlive it and the process that asked, and its state does not carry over
into the prefork pool's processes. Why not the pool process itself: it runs CPU calls, which may start CUDA.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import signal
import socket
import sys

from fluksio.execution.cuda import cuda_in_use
from fluksio.execution.forking import ForkServer, send_line
from fluksio.execution.package_server import PackageServers
from fluksio.execution.shipped import flow_code_modules
from fluksio.flows.registry import FlowRegistry
from fluksio.runtime import Runtime
from fluksio.settings import Settings, load_settings

log = logging.getLogger(__name__)
#: The loggers of the server's own lines (not its calls'): each with a handler of its own, none propagating.
SERVER_LOGGERS = ("fluksio.execution.forkserver", "fluksio.execution.forking", "fluksio.execution.package_server",
                  "fluksio.execution.runners")


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
    # Its own handler, on its own loggers: the root logger stays as bare as a fresh interpreter's, for the calls.
    said = logging.StreamHandler()
    said.setFormatter(logging.Formatter("[%(asctime)s: %(levelname)s/fork server] %(message)s"))
    for name in SERVER_LOGGERS:
        logging.getLogger(name).addHandler(said)
        logging.getLogger(name).setLevel(logging.INFO)
        logging.getLogger(name).propagate = False
    try:
        settings = load_settings()
        registry = FlowRegistry()
        before = set(sys.modules)
        registry.load_sources(settings.flows)
        # What a package server forgets before it imports a package: the flows' own modules, by name.
        flow_modules = flow_code_modules(set(sys.modules) - before, settings.flows)
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
    server = ForkServer(control, settings, registry)
    packages = PackageServers(settings, flow_modules, server.shed)
    server.route = packages.route
    server.serve()
    # The worker is stopping (its calls are done): the packages' runners go gently, their exit handlers run.
    packages.stop_all()


if __name__ == "__main__":
    main()
