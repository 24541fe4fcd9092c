"""The digest of the code a flow runs: every ``.py`` file of its source tree.

Memoised on each file's stat state, so re-reading it when a run is claimed
costs a ``stat`` per file, not a read.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import threading
from pathlib import Path

from fluksio.flows.flow import Flow

#: Folders never part of a flow's code.
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", "build", "dist"})
#: A tree larger than this is not walked past this many files (a flow in $HOME, say).
MAX_FILES = 5_000

_memo: dict[str, tuple[tuple[int, int, int, int], str]] = {}
_memo_lock = threading.Lock()


def source_root(flow: Flow) -> Path | None:
    """The folder of the file that defined the flow (the top of its package when it is in one)."""
    if not flow.source_file:
        return None
    folder = Path(flow.source_file).resolve().parent
    while (folder / "__init__.py").is_file() and (folder.parent / "__init__.py").is_file():
        folder = folder.parent
    return folder


def code_digest(flow: Flow) -> str:
    """sha256 over the flow's source tree; falls back to the node functions' source."""
    root = source_root(flow)
    hasher = hashlib.sha256()
    if root is None:
        for node in flow.nodes.values():
            try:
                hasher.update(inspect.getsource(node.fn).encode())
            except (OSError, TypeError):
                hasher.update(node.fn.__code__.co_code)
        return "sha256:" + hasher.hexdigest()
    for relative, digest in _tree(root):
        hasher.update(relative.encode() + b"\0" + digest.encode() + b"\n")
    return "sha256:" + hasher.hexdigest()


def _tree(root: Path) -> list[tuple[str, str]]:
    entries = []
    count = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs
            if not d.startswith(".") and d not in SKIPPED_DIRS and not (Path(folder, d) / "pyvenv.cfg").exists()
        )
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            count += 1
            if count > MAX_FILES:
                return entries
            path = os.path.join(folder, name)
            entries.append((os.path.relpath(path, root), _file_digest(path)))
    return entries


def _file_digest(path: str) -> str:
    try:
        stat = os.stat(path)
    except OSError:
        return "missing"
    # ctime too: an edit that keeps size and mtime (or restores the mtime) still changes ctime.
    key = (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)
    with _memo_lock:
        cached = _memo.get(path)
    if cached and cached[0] == key:
        return cached[1]
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"
    with _memo_lock:
        _memo[path] = (key, digest)
    return digest
