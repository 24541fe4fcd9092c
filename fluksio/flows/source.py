"""The digest of the code a flow runs: the sha256 of its code package (flows/package.py).

A flow defined in a file runs its file, the ``.py`` files of its source tree that it imports
(followed statically) and the data files its ``include`` globs name; the code package holds exactly
those, in an archive whose bytes depend on nothing else (not on mtimes, nor on where the project
lies), so its digest is the same on every machine and is what travels with a run. Editing a file
the flow never imports — a test, a script, another flow's module — neither invalidates its cache
entries nor makes its workers refuse calls.

Two readings of it: :func:`loaded_digest` is the code this process runs — the files as they were
when the flow's module ran (``Flow`` takes the snapshot), or the live node functions of a flow
defined without a file — and it is what a run is claimed with and what a worker checks a call
against. :func:`code_digest` is the files on disk now, which a long-lived process that imported the
flow before its files were edited does not run.

Memoised on each file's stat state (flows/package.py), so digesting an unchanged tree again costs a
``stat`` per file, not a read and an archive.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Sequence
from types import CodeType
from typing import TYPE_CHECKING

from fluksio.flows.package import PackageError, package_digest

if TYPE_CHECKING:  # flow.py imports this module to take its snapshot
    from fluksio.flows.flow import Flow

#: Hex digits of a digest shown in messages.
SHORT_HEX = 12


def snapshot(source_file: str | None, include: Sequence[str] = ()) -> str | None:
    """The digest of the code package of ``source_file`` and ``include``, as the files are now; ``None``
    without a file."""
    if not source_file:
        return None
    try:
        return package_digest(source_file, include)
    except (OSError, PackageError):  # an unreadable file or folder must not stop a module from defining its flow
        return None


def loaded_digest(flow: Flow) -> str:
    """The digest of the code this process loaded for the flow.

    A flow defined in a file: its code package as the files were when the flow was defined (its module
    ran), however they changed since. A flow defined without a file (a
    REPL, a notebook): its node functions as they are in this process.
    """
    return flow.source_digest or code_digest(flow)


def code_digest(flow: Flow) -> str:
    """The digest of the flow's code package as its files are on disk now; without a file, sha256 over the
    node functions' source.

    Not necessarily the code this process runs: see :func:`loaded_digest`. Raises ``PackageError`` when a
    file of the package cannot be read.
    """
    if flow.source_file:
        return package_digest(flow.source_file, flow.include)
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


def short(digest: str | None) -> str:
    """``sha256:ab12cd34ef56…``: enough of a digest to tell two apart in a message."""
    if not digest:
        return "none"
    kind, _, hexdigest = digest.partition(":")
    return f"{kind}:{hexdigest[:SHORT_HEX]}…" if len(hexdigest) > SHORT_HEX else digest
