"""Per-thread capture of stdout, stderr and logging, so concurrent calls in one process keep their logs apart."""

from __future__ import annotations

import io
import logging
import sys
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

_local = threading.local()
_install_lock = threading.Lock()
_installed = False


class _ThreadRouter(io.TextIOBase):
    """Writes go to the calling thread's capture buffer if it has one, else to the real stream."""

    def __init__(self, real: TextIO) -> None:
        self._real = real

    def write(self, text: str) -> int:
        buffer = getattr(_local, "buffer", None)
        if buffer is None:
            return self._real.write(text)
        buffer.write(text)
        return len(text)

    def flush(self) -> None:
        if getattr(_local, "buffer", None) is None:
            self._real.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _CaptureHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        buffer = getattr(_local, "buffer", None)
        if buffer is not None:
            buffer.write(self.format(record) + "\n")


def _install() -> None:
    """Route sys.stdout/sys.stderr through per-thread buffers (again, if someone replaced them since)."""
    global _installed
    with _install_lock:
        if not isinstance(sys.stdout, _ThreadRouter):
            sys.stdout = _ThreadRouter(sys.stdout)  # type: ignore[assignment]
        if not isinstance(sys.stderr, _ThreadRouter):
            sys.stderr = _ThreadRouter(sys.stderr)  # type: ignore[assignment]
        if not _installed:
            handler = _CaptureHandler()
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            logging.getLogger().addHandler(handler)
            _installed = True


class Captured:
    """What one call printed and logged; ``hide``: strings shown as ``***`` in :attr:`text` (its secrets)."""

    def __init__(self, limit: int, hide: Collection[str] = ()) -> None:
        self.limit = limit
        self.hide = sorted((value for value in hide if value), key=len, reverse=True)
        self.buffer = io.StringIO()

    def write(self, text: str) -> None:
        self.buffer.write(text)

    @property
    def text(self) -> str:
        value = self.buffer.getvalue()
        for secret in self.hide:  # before the cut: a value cut in half would otherwise show its end
            value = value.replace(secret, "***")
        if len(value) > self.limit:
            cut = len(value) - self.limit
            return f"[… {cut} earlier characters cut]\n" + value[-self.limit:]
        return value


@contextmanager
def capture_output(limit: int, hide: Collection[str] = ()) -> Iterator[Captured]:
    """Capture what this thread prints or logs, keeping the last ``limit`` characters, with each of ``hide``
    replaced by ``***``."""
    _install()
    captured = Captured(limit, hide)
    previous = getattr(_local, "buffer", None)
    _local.buffer = captured.buffer
    try:
        yield captured
    finally:
        _local.buffer = previous
