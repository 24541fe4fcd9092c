"""Which files of a flow's source tree its file imports, found by reading them, never by running them.

A code package (flows/package.py) holds the flow file and the ``.py`` files of its source tree (the
flow file's folder, or the top of the package it is in: :func:`root_of`) that it imports, so that
editing a file the flow never imports (a test, a script, another flow's module) changes neither its
code digest nor its cache entries. :func:`imported_files` follows every ``import`` and
``from … import`` that names a module of the tree, from the flow file on, with the ``__init__.py``
of the packages on the way, which Python runs too.

The walk is static (``ast`` over the source), never an import: it runs while the flow's own module is
still running (``Flow`` takes its snapshot then) and whenever a digest of the files as they are on disk
now is asked for (which a long-lived process's ``sys.modules`` does not show), and it must not run the
user's code to find out. So it sees import statements, not what runs: a module imported by a call
(``importlib.import_module(name)`` with a computed name, ``__import__``) is not found; import it by
name in the flow file if its edits must count. An import that never runs (in a branch not taken, a
docstring line that reads as one) is followed all the same: that only packs a file more.

Reading every file again on every digest would cost most of digesting an unchanged tree, so the
imports of each file are memoised on its stat state (:data:`StatKey`): an unchanged file costs a
``stat``. Filesystems stamp times from a coarse clock, so two writes of the same size within one tick
leave the same stat state; a file that changed within :data:`SETTLE_NS` is read again each time
rather than remembered (:func:`settled`). flows/package.py memoises its digest the same way.
"""

from __future__ import annotations

import ast
import os
import re
import threading
import time
from pathlib import Path

#: Most files followed from one flow file (a flow in $HOME importing half of it, say).
MAX_FILES = 5_000
#: How long after its last change (ctime) a file's stat state is trusted to stand for its content, in
#: nanoseconds. Filesystems stamp times from a coarse clock (a few ms on Linux): two writes of the same
#: size within one tick leave the same stat state, so a file changed this recently is read again.
SETTLE_NS = 100_000_000

#: What an ``import`` or ``from … import`` names: (dots before the module, the module, the names imported).
Import = tuple[int, str, tuple[str, ...]]
#: A file's stat state: (mtime, ctime, size, inode). ctime too: an edit that keeps the size and restores
#: the mtime still moves the ctime.
StatKey = tuple[int, int, int, int]
#: Files read while imports were followed: their stat state before the read, and the bytes read.
Contents = dict[Path, tuple[StatKey, bytes]]

#: A line that starts with ``import`` or ``from``: an import statement, or the first line of one.
_IMPORT_LINE = re.compile(rb"^[ \t\f]*(?:import|from)\b[^\n]*", re.MULTILINE)
#: An import after a ``;`` or a ``:`` on its line (``try: import x``): the file is parsed whole.
_INLINE_IMPORT = re.compile(rb"[;:](?:[ \t\f]|\\\r?\n)*(?:import|from)\b")
_imports_memo: dict[str, tuple[StatKey, tuple[Import, ...]]] = {}
_memo_lock = threading.Lock()


def root_of(source_file: str | None) -> Path | None:
    """The folder of ``source_file``, or the top of the package it is in; ``None`` without a file."""
    if not source_file:
        return None
    folder = Path(source_file).resolve().parent
    while (folder / "__init__.py").is_file() and (folder.parent / "__init__.py").is_file():
        folder = folder.parent
    return folder


def imported_files(root: Path, start: Path, contents: Contents | None = None) -> dict[Path, StatKey | None]:
    """``start`` and the files of ``root`` it imports, each with its stat state (``None``: unreadable).

    From ``start``, every ``import`` and ``from … import`` (module level or in a function) that names a
    module of the tree is followed, statically, and so on from each module reached, with the
    ``__init__.py`` of the packages on the way, which Python runs too. Editing a file the flow never
    imports (a test, a script, another flow's module) changes nothing. Modules imported by a computed
    name (``importlib.import_module(name)``) are not seen: import them by name in the flow file if
    their edits must count.

    Paths are taken as Python imports them, never resolved: a module that is a symlink (even to a file
    outside the tree) counts under its name in the tree, with the content it points to. An absolute
    import is looked for from every folder between the importing file and the tree's parent, since
    which of them is on ``sys.path`` depends on how the flow was loaded (a file path, a module name, a
    namespace package): finding a module that would not be imported only makes the package larger.
    The files read on the way are put in ``contents``, so that packing need not read them again.
    """
    todo = [start] + [folder / "__init__.py" for folder in start.parents
                      if folder.is_relative_to(root) and (folder / "__init__.py").is_file()]
    found: dict[Path, StatKey | None] = {}
    read: Contents = {} if contents is None else contents
    while todo and len(found) < MAX_FILES:
        path = todo.pop()
        if path in found:
            continue
        key, imports = _read(path, read)
        found[path] = key
        todo += [target for target in _imported_files(path, root, imports) if target not in found]
    return found


def stat_key(status: os.stat_result) -> StatKey:
    """The stat state of a file, from its ``os.stat`` (or ``os.fstat``)."""
    return status.st_mtime_ns, status.st_ctime_ns, status.st_size, status.st_ino


def settled(key: StatKey) -> bool:
    """Whether the file last changed long enough ago that a change now would show in its stat state."""
    return key[1] < time.time_ns() - SETTLE_NS


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


def _read(path: Path, contents: Contents) -> tuple[StatKey | None, tuple[Import, ...]]:
    """The stat state of ``path`` and the imports it makes; its bytes go to ``contents`` when read."""
    try:
        key = stat_key(os.stat(path))
    except OSError:
        return None, ()
    with _memo_lock:
        cached = _imports_memo.get(str(path))
    if cached and cached[0] == key:
        return key, cached[1]
    try:
        content = path.read_bytes()
    except OSError:
        return None, ()
    contents[path] = (key, content)
    imports = _imports_of(content)
    if settled(key):
        with _memo_lock:
            _imports_memo[str(path)] = (key, imports)
    return key, imports


def _imports_of(content: bytes) -> tuple[Import, ...]:
    """The imports ``content`` makes: each import statement parsed on its own, found by its first word.

    Parsing a whole file for its few imports would cost most of a first pack (2 ms per 20 KB module). An
    import statement starts a line, or follows a ``;`` or a compound statement's ``:`` on its line; a
    file with one of the latter, or with a line starting ``import``/``from`` that is no import alone
    (prose in a docstring, ``raise … from``), is parsed whole. A docstring line that is a valid import
    counts as one: that only packs a file more.
    """
    content = content.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark before the first line
    if _INLINE_IMPORT.search(content):
        return _parsed_imports(content)
    found: list[Import] = []
    for match in _IMPORT_LINE.finditer(content):
        try:
            body = ast.parse(_statement_at(content, match.start(), match.end())).body
        except (SyntaxError, ValueError):
            return _parsed_imports(content)
        if len(body) != 1 or not isinstance(body[0], (ast.Import, ast.ImportFrom)):
            return _parsed_imports(content)
        found += _described(body[0])
    return tuple(found)


def _statement_at(content: bytes, start: int, end: int) -> bytes:
    """The statement whose first line is ``content[start:end]``: on to a ``)`` it opens, and past every ``\\``."""
    opening = content.find(b"(", start, end)
    if opening != -1:  # `from pkg import (a,\n b)`
        closing = content.find(b")", opening)
        end = max(end, len(content) if closing == -1 else _line_end(content, closing))
    while content[start:end].rstrip().endswith(b"\\"):
        end = _line_end(content, end + 1)
    return content[start:end].strip()


def _line_end(content: bytes, position: int) -> int:
    newline = content.find(b"\n", position)
    return len(content) if newline == -1 else newline


def _parsed_imports(content: bytes) -> tuple[Import, ...]:
    """The imports of the whole file, parsed: those of every statement, at any depth (never in expressions)."""
    try:
        tree = ast.parse(content)
    except (SyntaxError, ValueError):  # it is still packed; what it would import cannot be known
        return ()
    found: list[Import] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found += _described(node)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):  # the blocks a statement holds
            block = getattr(node, field, None)
            if isinstance(block, list):
                todo += block
    return tuple(found)


def _described(node: ast.Import | ast.ImportFrom) -> list[Import]:
    if isinstance(node, ast.Import):
        return [(0, alias.name, ()) for alias in node.names]
    return [(node.level, node.module or "", tuple(alias.name for alias in node.names))]
