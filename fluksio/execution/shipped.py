"""A shipped code package imported in a process of its own: a package server forked from the fork server
(fluksio/execution/package_server.py), or a fresh interpreter (fluksio/execution/isolated.py).

Never in a pool process, nor in the fork server itself: two versions of one module cannot live in one
process, so each package gets a process whose only flow code is that package. A process forked from the fork
server first forgets the modules the fork server imported for ``FLUKSIO_FLOWS`` (:func:`flow_code_modules`
says which), so that a package module named like one of them is the package's, and none of the worker's code
is reached by the package's imports.

Whatever goes wrong is one line for the node's error: an import that fails (with the file and line, as
``FLUKSIO_FLOWS`` failures are said), a flow or node the package lacks, files that do not digest to the
package's digest.
"""

from __future__ import annotations

import importlib
import os
import site
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fluksio.errors import FlowError, FlowNotFound, NodeFailed, first_line
from fluksio.flows.flow import Flow
from fluksio.flows.node import NodeSpec
from fluksio.flows.registry import FlowRegistry, load_flows
from fluksio.flows.source import short
from fluksio.messages import NodeCall


@dataclass(frozen=True)
class LoadedPackage:
    """A code package as this process imported it: its flows, or why they could not be imported."""

    folder: Path
    entry: str
    #: The flows the entry defines (empty when the import failed).
    registry: FlowRegistry
    #: Why importing the entry failed, in one line; ``None`` when it did not.
    failure: str | None = None
    #: The code digests of the flows the entry defines, as this process loaded them: the package's digest must
    #: be one of them (a subflow defined in another module of the package runs under its parent's package).
    digests: frozenset[str] = frozenset()

    def node_for(self, call: NodeCall) -> tuple[Flow, NodeSpec]:
        """The flow and node ``call`` runs from this package; :class:`NodeFailed` in one line when the package
        failed to import, lacks them, or its files are not the code the run was claimed with."""
        package = f"code package {short(call.code_digest)}"
        if self.failure is not None:
            raise NodeFailed(f"{package} failed to import on machine {call.grant.machine}: {self.failure}")
        names = self.registry.names()
        if call.flow not in names:
            raise NodeFailed(f"{package} defines no flow {call.flow!r} in {self.entry} (it defines: "
                             f"{', '.join(names) or 'none'})")
        if call.code_digest not in self.digests:
            # What was imported is not what was signed and stored: never run it under the package's name.
            loaded = ", ".join(sorted(short(d) for d in self.digests)) or "nothing"
            raise NodeFailed(f"{package}: the package's files do not digest to {short(call.code_digest)} once "
                             f"unpacked on machine {call.grant.machine} (its flows loaded as {loaded}); refused")
        flow = self.registry.get(call.flow)
        node = flow.nodes.get(call.node)
        if node is None:
            raise NodeFailed(f"flow {call.flow!r} of {package} has no node {call.node!r} (its nodes: "
                             f"{', '.join(flow.nodes) or 'none'})")
        return flow, node


def load_package(folder: Path, entry: str) -> LoadedPackage:
    """Import ``entry`` (a module name, or a file's path inside the package) with ``folder`` first on
    ``sys.path``, and register the flows it defines; a failure is kept in the result, never raised."""
    folder = Path(folder)
    # The package folder is the worker's cache: no .pyc files written into it, whose bytes no digest covers.
    sys.dont_write_bytecode = True
    sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    registry = FlowRegistry()
    outside = entry_outside(folder, entry)
    if outside is not None:  # never import it: a message or the run store named it, not the package
        return LoadedPackage(folder, entry, registry, outside)
    source = str(folder / entry) if _is_file(entry) else entry
    digests: set[str] = set()
    try:
        for flow in load_flows(source):
            registry.register(flow)
            digests.add(registry.digest(flow))
    except (FlowNotFound, FlowError) as exc:
        return LoadedPackage(folder, entry, FlowRegistry(), first_line(str(exc), "it failed"))
    except Exception as exc:  # noqa: BLE001 - the package's own failure, said in the node's error
        return LoadedPackage(folder, entry, FlowRegistry(), first_line(f"{type(exc).__name__}: {exc}"))
    return LoadedPackage(folder, entry, registry, digests=frozenset(digests))


def entry_outside(folder: Path, entry: str) -> str | None:
    """Why ``entry`` is not something of the package in ``folder`` (one line), or ``None``: it is.

    A file must be a ``.py`` file of the package (no absolute path, no ``..``, nothing a link leads out to);
    a module must be dotted identifiers whose top is a module or package of the package, which is first on
    ``sys.path``. The entry travels beside the digest, so it is checked before anything is imported.
    """
    refused = f"its entry {entry!r} is not a module or file of the package; refused, nothing imported"
    if _is_file(entry):
        path = folder / entry
        if (entry.startswith("/") or ".." in Path(entry).parts or not entry.endswith(".py")
                or not path.resolve().is_relative_to(folder.resolve()) or not path.is_file()):
            return refused
        return None
    parts = entry.split(".")
    if not all(part.isidentifier() for part in parts):
        return refused
    top = folder / parts[0]
    if not ((top.with_name(parts[0] + ".py")).is_file() or (top / "__init__.py").is_file()):
        return refused
    return None


def _is_file(entry: str) -> bool:
    """An entry that names a file in the package (``flows.py``, ``sub/flows.py``), not a module."""
    return entry.endswith(".py") or "/" in entry


def flow_code_modules(appeared: Iterable[str], sources: Iterable[str]) -> list[str]:
    """Of the modules that ``appeared`` while ``FLUKSIO_FLOWS`` (``sources``) was loaded, the installation's own
    flow code: what a process that imports a package must forget first.

    That is every module of a top-level package that is not fluksio and not installed in the interpreter (its
    file is outside the standard library and site-packages), the files loaded by path, and every module of a
    package ``FLUKSIO_FLOWS`` names by module. The libraries the flows imported (numpy, torch) stay: they are
    not the flows' code, and an extension module cannot be imported twice into one process.
    """
    appeared = sorted(set(appeared))
    tops = {source.partition(":")[0].split(".")[0] for source in sources
            if not _is_file(source.partition(":")[0])}
    libraries = _library_folders()
    for name in appeared:
        top = name.split(".")[0]
        if top == "fluksio" or top in tops:
            continue
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file and not any(_inside(file, folder) for folder in libraries):
            tops.add(top)
    return [name for name in appeared if name.split(".")[0] in tops]


def forget_modules(names: Iterable[str]) -> None:
    """Drop ``names`` from ``sys.modules``: an import of one of them now finds the package's module, if any."""
    for name in names:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()


def _library_folders() -> list[str]:
    """Where the interpreter's own modules and the installed packages live."""
    paths = sysconfig.get_paths()
    folders = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    folders.update(site.getsitepackages())
    user = site.getusersitepackages()
    if isinstance(user, str):
        folders.add(user)
    return sorted(os.path.realpath(folder) for folder in folders)


def _inside(file: str, folder: str) -> bool:
    return os.path.realpath(file).startswith(folder + os.sep)
