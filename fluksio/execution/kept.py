"""Kept runners: a pool process's own runner per shipped code package, which its later calls of that package
go to directly, with no hop through the fork server or the package server.

Asking the fork server for each call costs three processes' turns before the call starts and two after it
ends (pool process → fork server → package server → runner, and the server's word that the runner is done).
On a machine with few cores that made a warm package's call about 1.6× a registered one's. So the first CPU
call of a package in a pool process asks once to keep a runner (fluksio/execution/runners.py says the
server's side): it sends a *lifeline* and a *channel*, and from then on writes each call to the runner on the
channel — its length and its JSON; the first also carries the pipe that all of its calls' output goes to —
and reads one line back, ``{"completion": …, "again": …}``.

The guarantees of a runner hold: the package server watches the lifeline, so this process dying (a cancel)
kills the runner and its call at once, and a call this process gives up on (an interrupt while it waits) is
killed by a ``k`` on it; a runner that dies mid-call is reaped by its server, which says its exit code on the
lifeline. A runner that left between two calls (idle, its server stopped) exits with ``UNTAKEN``, and one
already gone refuses the call's bytes: either way the call never started, so it is asked of a new runner. At
most :data:`MOST_KEPT` packages keep a runner per pool process; past that, the one used least recently is let
go gently (``q``: it runs its exit handlers).
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from fluksio.execution.forking import LENGTH
from fluksio.execution.runners import KILL, QUIT, UNTAKEN
from fluksio.messages import Completion

#: Packages one pool process keeps a runner for at once; past it, the least recently used one is let go.
MOST_KEPT = 4
#: After a kept runner's channel ended mid-call, how long its server has to say its exit code, in seconds.
EXIT_WAIT_S = 10.0

log = logging.getLogger(__name__)

#: Sends a request on the fork server's control socket: ``(header, [lifeline, channel])``.
Ask = Callable[[bytes, list[int]], object]


@dataclass(eq=False)
class Kept:
    """A runner this pool process keeps: its lifeline and channel, the read end of its calls' output pipe (the
    write end goes to it with the first call), and when it was last used."""

    lifeline: socket.socket
    channel: socket.socket
    output: int
    #: The write end of the output pipe, until the first call hands it to the runner.
    output_w: int | None
    used: float = 0.0

    def close(self, say: bytes = QUIT) -> None:
        """Let the runner go: ``q`` lets it exit gently, ``k`` has it killed (its call must not go on)."""
        try:
            self.lifeline.send(say)
        except OSError:
            pass  # its server is gone, and the runner with it
        self.channel.close()
        self.lifeline.close()
        os.close(self.output)
        if self.output_w is not None:
            os.close(self.output_w)


class Listener(Protocol):
    """What hears a call's lines and output (fluksio/execution/warm.py's ``Heard``)."""

    completion: Completion | None
    exit: int | None

    def hear(self, line: bytes | bytearray) -> None: ...

    def read_output(self, fd: int) -> bool: ...


class KeptRunners:
    """The runners this pool process keeps, by package (its folder and entry); ``ask`` sends a request to the
    fork server."""

    def __init__(self, ask: Ask, most: int = MOST_KEPT) -> None:
        self.ask = ask
        self.most = most
        self.pid = os.getpid()
        self.kept: dict[tuple[str, str], Kept] = {}

    def run(self, package: str, entry: str, body: bytes, heard: Listener) -> None:
        """Run the call ``body`` in this process's runner of the package (asking for one if need be); ``heard``
        hears what it says and writes. Raises :class:`OSError` when no runner took the call (nothing of it ran:
        the caller asks the usual way instead)."""
        if os.getpid() != self.pid:  # a process forked from the one that asked: those runners are not its own
            self.kept, self.pid = {}, os.getpid()
        key = (package, entry)
        for _attempt in range(2):
            kept = self.kept.get(key) or self._keep(key)
            again = self._call(kept, body, heard)
            if heard.exit != UNTAKEN:
                if not again:
                    self._drop(key, QUIT if heard.completion is not None else KILL)
                return
            heard.exit = None
            self._drop(key, QUIT)  # it left before it read the call (idle, or let go): ask for another
        raise OSError("no kept runner took the call")

    def close(self) -> None:
        """Let every kept runner go gently (each runs its exit handlers and exits)."""
        for key in list(self.kept):
            self._drop(key, QUIT)

    def _keep(self, key: tuple[str, str]) -> Kept:
        lifeline, theirs_l = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        channel, theirs_c = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        header = json.dumps({"package": key[0], "entry": key[1], "keep": True}).encode()
        try:
            self.ask(header, [theirs_l.fileno(), theirs_c.fileno()])
        except OSError:
            lifeline.close()
            channel.close()
            raise
        finally:
            theirs_l.close()  # the server's alone now: when the runner is gone, both end
            theirs_c.close()
        output, output_w = os.pipe()
        os.set_blocking(output, False)
        kept = Kept(lifeline, channel, output, output_w)
        self.kept[key] = kept
        while len(self.kept) > self.most:
            oldest = min((k for k in self.kept if k != key), key=lambda k: self.kept[k].used)
            self._drop(oldest, QUIT)
        return kept

    def _drop(self, key: tuple[str, str], say: bytes) -> None:
        kept = self.kept.pop(key, None)
        if kept is not None:
            kept.close(say)

    def _call(self, kept: Kept, body: bytes, heard: Listener) -> bool:
        """Hand the call to ``kept`` and hear it out; whether the runner may take another. A runner gone before it
        took the call leaves ``heard.exit`` at ``UNTAKEN``."""
        kept.used = time.monotonic()
        try:
            if kept.output_w is not None:
                socket.send_fds(kept.channel, [LENGTH.pack(len(body))], [kept.output_w])
                os.close(kept.output_w)  # the runner's alone now
                kept.output_w = None
            else:
                kept.channel.sendall(LENGTH.pack(len(body)))
            kept.channel.sendall(body)
        except OSError:  # its end is closed: the runner is gone, and never read the call
            heard.exit = UNTAKEN
            return False
        try:
            again = _listen(kept.channel, kept.output, heard)
        except OSError:
            again = False  # the channel broke: the runner is gone, and its server says how below
        except BaseException:
            # Interrupted while the call runs (a cancel raised here): it must not go on in the runner.
            for key, held in list(self.kept.items()):
                if held is kept:
                    self._drop(key, KILL)
            raise
        if heard.completion is None:
            heard.exit = _exit_code(kept.lifeline)
        return again


def _listen(channel: socket.socket, output: int, heard: Listener) -> bool:
    """Read the call's output until its completion comes on ``channel`` (or the channel ends); whether the
    runner said it may take another call."""
    pending = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(channel, selectors.EVENT_READ, "channel")
        selector.register(output, selectors.EVENT_READ, "output")
        while True:
            for key, _ in selector.select():
                if key.data == "output":
                    heard.read_output(output)
                    continue
                chunk = channel.recv(1 << 16)
                if not chunk:
                    heard.read_output(output)
                    return False
                pending += chunk
                if b"\n" in pending:
                    line = pending.partition(b"\n")[0]
                    heard.hear(line)
                    heard.read_output(output)  # the runner wrote all of the call's output before it reported
                    return json.loads(line).get("again") is True


def _exit_code(lifeline: socket.socket) -> int | None:
    """The runner's exit code, once its server says it (it died mid-call, or left before the call);
    ``None`` if not said in time."""
    lifeline.settimeout(EXIT_WAIT_S)
    said = bytearray()
    try:
        while b"\n" not in said:
            chunk = lifeline.recv(1 << 12)
            if not chunk:
                break
            said += chunk
    except OSError:
        pass
    try:
        return int(json.loads(said.partition(b"\n")[0])["exit"])
    except (ValueError, KeyError, TypeError):
        return None
