"""The digest of the code a flow runs: every ``.py`` file of its source tree.

Two readings of it: :func:`loaded_digest` is the code this process runs — the
tree as it was when the flow's module ran (``Flow`` takes the snapshot), or the
live node functions of a flow defined without a file — and it is what a run is
claimed with and what a worker checks a call against. :func:`code_digest` is
the tree on disk now, which a long-lived process that imported the flow before
its files were edited does not run.

Memoised on each file's stat state, so re-reading a tree costs a ``stat`` per
file, not a read.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import threading
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # flow.py imports this module to take its snapshot
    from fluksio.flows.flow import Flow

#: Folders never part of a flow's code.
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", "build", "dist"})
#: A tree larger than this is not walked past this many files (a flow in $HOME, say).
MAX_FILES = 5_000
#: Hex digits of a digest shown in messages.
SHORT_HEX = 12

_memo: dict[str, tuple[tuple[int, int, int, int], str]] = {}
_memo_lock = threading.Lock()


def source_root(flow: Flow) -> Path | None:
    """The folder of the file that defined the flow (the top of its package when it is in one)."""
    return root_of(flow.source_file)


def root_of(source_file: str | None) -> Path | None:
    """The folder of ``source_file``, or the top of the package it is in; ``None`` without a file."""
    if not source_file:
        return None
    folder = Path(source_file).resolve().parent
    while (folder / "__init__.py").is_file() and (folder.parent / "__init__.py").is_file():
        folder = folder.parent
    return folder


def snapshot(source_file: str | None) -> str | None:
    """The digest of the source tree of ``source_file`` as it is now; ``None`` without a file."""
    try:
        root = root_of(source_file)
        return None if root is None else tree_digest(root)
    except OSError:  # an unreadable folder must not stop a module from defining its flow
        return None


def loaded_digest(flow: Flow) -> str:
    """The digest of the code this process loaded for the flow.

    A flow defined in a file: its tree as it was when the flow was defined (its module ran), however
    the files changed since. A flow defined without a file (a REPL, a notebook): its node functions as
    they are in this process.
    """
    return flow.source_digest or code_digest(flow)


def code_digest(flow: Flow) -> str:
    """sha256 over the flow's source tree on disk now; falls back to the node functions' source.

    Not necessarily the code this process runs: see :func:`loaded_digest`.
    """
    root = source_root(flow)
    if root is not None:
        return tree_digest(root)
    hasher = hashlib.sha256()
    for node in flow.nodes.values():
        try:
            hasher.update(inspect.getsource(node.fn).encode())
        except (OSError, TypeError):  # no source to read (a plain REPL): the compiled code instead
            _hash_code(hasher, node.fn.__code__)
    return "sha256:" + hasher.hexdigest()


def _hash_code(hasher: hashlib._Hash, code: CodeType) -> None:
    # The bytecode alone is not the code: `x + 1` and `x + 2` differ only in their constants.
    hasher.update(code.co_code)
    hasher.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)).encode())
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            _hash_code(hasher, constant)
        elif isinstance(constant, frozenset):  # `x in {"a", "b"}`: its repr's order varies by process
            hasher.update(repr(sorted(map(repr, constant))).encode())
        else:
            hasher.update(f"{type(constant).__name__}:{constant!r}".encode())


def tree_digest(root: Path) -> str:
    """sha256 over the relative path and content of every ``.py`` file under ``root``."""
    hasher = hashlib.sha256()
    for relative, digest in _tree(root):
        hasher.update(relative.encode() + b"\0" + digest.encode() + b"\n")
    return "sha256:" + hasher.hexdigest()


def short(digest: str | None) -> str:
    """``sha256:ab12cd34ef56…``: enough of a digest to tell two apart in a message."""
    if not digest:
        return "none"
    kind, _, hexdigest = digest.partition(":")
    return f"{kind}:{hexdigest[:SHORT_HEX]}…" if len(hexdigest) > SHORT_HEX else digest


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
