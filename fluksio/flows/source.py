"""The digest of the code a flow runs: its file and the ``.py`` files it imports from its source tree.

The source tree is the flow file's folder, or the top of the package it is in.
From the flow file, every ``import`` and ``from … import`` (module level or in
a function) that names a module of that tree is followed, statically, and so
on from each module reached (with the ``__init__.py`` of the packages on the
way, which Python runs too). Editing a file the flow never imports — a test, a
script, another flow's module — neither invalidates its cache entries nor makes
its workers refuse calls. Modules imported by a computed name
(``importlib.import_module(name)``) are not seen: import them by name in the
flow file if their edits must count.

Two readings of it: :func:`loaded_digest` is the code this process runs — the
files as they were when the flow's module ran (``Flow`` takes the snapshot), or
the live node functions of a flow defined without a file — and it is what a run
is claimed with and what a worker checks a call against. :func:`code_digest` is
the files on disk now, which a long-lived process that imported the flow before
its files were edited does not run.

Memoised on each file's stat state, so re-reading the files costs a ``stat``
per file, not a read and a parse.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import os
import threading
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # flow.py imports this module to take its snapshot
    from fluksio.flows.flow import Flow

#: Most files followed from one flow file (a flow in $HOME importing half of it, say).
MAX_FILES = 5_000
#: Hex digits of a digest shown in messages.
SHORT_HEX = 12

#: What a ``from``-less or ``from`` import names: (dots before the module, the module, the names imported).
Import = tuple[int, str, tuple[str, ...]]

_memo: dict[str, tuple[tuple[int, int, int, int], str, tuple[Import, ...]]] = {}
_memo_lock = threading.Lock()


def root_of(source_file: str | None) -> Path | None:
    """The folder of ``source_file``, or the top of the package it is in; ``None`` without a file."""
    if not source_file:
        return None
    folder = Path(source_file).resolve().parent
    while (folder / "__init__.py").is_file() and (folder.parent / "__init__.py").is_file():
        folder = folder.parent
    return folder


def snapshot(source_file: str | None, include: tuple[str, ...] = ()) -> str | None:
    """The digest of ``source_file`` and what it imports from its tree, as they are now; ``None`` without a file."""
    try:
        return None if not source_file else file_digest(Path(source_file))
    except OSError:  # an unreadable folder must not stop a module from defining its flow
        return None


def loaded_digest(flow: Flow) -> str:
    """The digest of the code this process loaded for the flow.

    A flow defined in a file: its file and what it imports from its tree, as they were when the flow
    was defined (its module ran), however the files changed since. A flow defined without a file (a
    REPL, a notebook): its node functions as they are in this process.
    """
    return flow.source_digest or code_digest(flow)


def code_digest(flow: Flow) -> str:
    """sha256 over the flow's file and what it imports from its tree, on disk now; without a file, over
    the node functions' source.

    Not necessarily the code this process runs: see :func:`loaded_digest`.
    """
    if flow.source_file:
        return file_digest(Path(flow.source_file))
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


def file_digest(path: Path) -> str:
    """sha256 over the relative path and content of ``path`` and of every file of its tree it imports."""
    root = root_of(str(path))
    assert root is not None
    hasher = hashlib.sha256()
    for relative, digest in _imported_tree(root, path.resolve()):
        hasher.update(relative.encode() + b"\0" + digest.encode() + b"\n")
    return "sha256:" + hasher.hexdigest()


def short(digest: str | None) -> str:
    """``sha256:ab12cd34ef56…``: enough of a digest to tell two apart in a message."""
    if not digest:
        return "none"
    kind, _, hexdigest = digest.partition(":")
    return f"{kind}:{hexdigest[:SHORT_HEX]}…" if len(hexdigest) > SHORT_HEX else digest


def _imported_tree(root: Path, start: Path) -> list[tuple[str, str]]:
    """``(path relative to root, content digest)`` of ``start`` and the files of ``root`` it imports, sorted.

    Paths are taken as Python imports them, never resolved: a module that is a symlink (even to a file
    outside the tree) counts under its name in the tree, with the content it points to. An absolute
    import is looked for from every folder between the importing file and the tree's parent, since
    which of them is on ``sys.path`` depends on how the flow was loaded (a file path, a module name, a
    namespace package): finding a module that would not be imported only makes the digest stricter.
    """
    todo = [start] + [folder / "__init__.py" for folder in start.parents
                      if folder.is_relative_to(root) and (folder / "__init__.py").is_file()]
    found: dict[Path, str] = {}
    while todo and len(found) < MAX_FILES:
        path = todo.pop()
        if path in found:
            continue
        digest, imports = _read(str(path))
        found[path] = digest
        todo += [target for target in _imported_files(path, root, imports) if target not in found]
    return sorted((os.path.relpath(path, root), digest) for path, digest in found.items())


def _imported_files(path: Path, root: Path, imports: tuple[Import, ...]) -> list[Path]:
    """The files of ``root`` that the imports of the file ``path`` may load."""
    searched = [folder for folder in path.parents if folder.is_relative_to(root.parent)]
    files: list[Path] = []
    for level, module, imported in imports:
        dotted = tuple(module.split(".")) if module else ()
        if level:  # `from .. import x`: the importing file's folder, then one folder up per extra dot
            if level > len(searched):
                continue  # beyond the tree's parent: nothing of the tree
            anchors = [searched[level - 1]]
        else:
            anchors = searched
        for anchor in anchors:
            for prefix in range(1, len(dotted) + 1):
                files += _module_files(anchor, root, dotted[:prefix])
            for name in imported:
                if name == "*":  # `from pkg import *` may load any module of pkg (its __all__ says which)
                    folder = anchor.joinpath(*dotted)
                    if folder.is_relative_to(root) and (folder / "__init__.py").is_file():
                        files += sorted(folder.glob("*.py"))
                else:  # `from pkg import name`: name may be a module of pkg
                    files += _module_files(anchor, root, dotted + (name,))
    return files


def _module_files(anchor: Path, root: Path, dotted: tuple[str, ...]) -> list[Path]:
    """The file of module ``dotted`` under ``anchor`` (``a/b.py`` or ``a/b/__init__.py``), if in ``root``."""
    if not dotted:
        return []
    stem = anchor.joinpath(*dotted)
    if not stem.is_relative_to(root):
        return []
    return [path for path in (stem.with_name(stem.name + ".py"), stem / "__init__.py") if path.is_file()]


def _read(path: str) -> tuple[str, tuple[Import, ...]]:
    """The content digest of ``path`` and the imports it makes."""
    try:
        stat = os.stat(path)
    except OSError:
        return "missing", ()
    # ctime too: an edit that keeps size and mtime (or restores the mtime) still changes ctime.
    key = (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)
    with _memo_lock:
        cached = _memo.get(path)
    if cached and cached[0] == key:
        return cached[1], cached[2]
    try:
        content = Path(path).read_bytes()
    except OSError:
        return "unreadable", ()
    digest = hashlib.sha256(content).hexdigest()
    imports = _imports_of(content)
    with _memo_lock:
        _memo[path] = (key, digest, imports)
    return digest, imports


def _imports_of(content: bytes) -> tuple[Import, ...]:
    try:
        tree = ast.parse(content)
    except (SyntaxError, ValueError):  # its digest still counts; what it would import cannot be known
        return ()
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(0, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or "", tuple(alias.name for alias in node.names)))
    return tuple(found)
