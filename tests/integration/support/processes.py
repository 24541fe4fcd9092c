"""Processes the tests watch from outside: the pid a call left as a mark (``<tag>.<pid>`` in a folder of marks),
and whether a process is gone."""

from __future__ import annotations

import time
from pathlib import Path


def wait_for_mark(marks: Path, tag: str, timeout: float = 20) -> int:
    """The pid of the first mark ``<tag>.<pid>`` to appear in ``marks`` (as gpu_flows.leave_pid_mark leaves it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list(marks.glob(f"{tag}.*"))
        if found:
            return int(found[0].suffix[1:])
        time.sleep(0.02)
    raise TimeoutError(f"no mark {tag} within {timeout} s")


def gone(pid: int, timeout: float = 10) -> bool:
    """Whether process ``pid`` is gone (or a zombie nobody reaped yet) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False
