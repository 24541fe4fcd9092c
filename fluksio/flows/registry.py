"""Finding flows: by ``path/file.py:attr``, ``package.module:attr`` or a registered name.

A worker only ever runs flows its registry holds, so a forged call cannot make
it import an arbitrary module: names resolve against what the installation
registered (``FLUKSIO_FLOWS``) or what this process defined itself.

The registry also records the digest of the code this process loaded for each
flow (flows/source.py: ``loaded_digest``), which is what a driver claims a run
with and what a worker checks each call against: a long-lived process runs
the code it imported, not the files as they are on disk now.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from fluksio.errors import FlowError, FlowNotFound, did_you_mean
from fluksio.flows.flow import Flow
from fluksio.flows.node_code import node_codes
from fluksio.flows.package import FLOWFILE_MODULE_PREFIX
from fluksio.flows.source import loaded_digest

#: Earlier versions of a flow kept per name after it is re-registered with other code, so that runs
#: claimed with one (in this process: a notebook that redefined the flow) still finish on its code.
KEPT_VERSIONS = 8


@dataclass(frozen=True)
class _Entry:
    flow: Flow
    #: The digest of the code this process loaded for it, recorded when it was registered.
    digest: str
    #: How many nodes it had then: a flow without a file digests its node functions, so a node added
    #: since (a notebook cell) changes its digest.
    nodes: int


class FlowRegistry:
    """Flows by name, thread-safe. One per runtime (client or worker)."""

    def __init__(self) -> None:
        self._flows: dict[str, _Entry] = {}
        #: Per name, every version still held, by digest, oldest first; the newest is ``_flows[name]``.
        self._versions: dict[str, dict[str, Flow]] = {}
        self._lock = threading.Lock()

    def register(self, flow: Flow) -> Flow:
        """Add ``flow`` (or replace the flow of that name) and record the digest of its code as loaded.

        The flows it runs as subflows are registered with it: a driver drives its child runs by name.
        """
        flow.validate()
        for child in flow.subflows():
            if self._flows.get(child.name) is None or self._flows[child.name].flow is not child:
                self.register(child)
        current = self._flows.get(flow.name)
        if current is not None and current.flow is flow and current.nodes == len(flow.nodes):
            return flow  # registered already (every submit of a flow object comes here)
        entry = _Entry(flow, loaded_digest(flow), len(flow.nodes))
        # The code identity of each node is read from the files while they are still the ones just loaded: a
        # file edited later leaves the nodes of this (old) code keyed on the flow's whole digest instead.
        node_codes(flow)
        with self._lock:
            self._flows[flow.name] = entry
            versions = self._versions.setdefault(flow.name, {})
            versions.pop(entry.digest, None)  # re-inserted as the newest
            versions[entry.digest] = flow
            while len(versions) > KEPT_VERSIONS:
                del versions[next(iter(versions))]
        return flow

    def get(self, name: str) -> Flow:
        try:
            return self._flows[name].flow
        except KeyError:
            known = ", ".join(sorted(self._flows)) or "none"
            raise FlowNotFound(
                f"no flow named {name!r} is registered here (registered: {known}); add its module or file to "
                f"FLUKSIO_FLOWS, or pass path/file.py:attr or package.module:attr{did_you_mean(name, self._flows)}"
            ) from None

    def digest(self, flow: str | Flow) -> str:
        """The digest of the code this process loaded for a flow, as recorded when it was registered.

        By name: the flow registered under it now (:class:`FlowNotFound` if none). Given the ``Flow``
        itself — what a driver walks, which a later registration under its name may have replaced — that
        object's own digest.
        """
        if isinstance(flow, str):
            self.get(flow)  # raises, naming what is registered
            return self._flows[flow].digest
        with self._lock:
            versions = list(self._versions.get(flow.name, {}).items())
        for digest, version in reversed(versions):
            if version is flow:
                return digest
        return loaded_digest(flow)

    def version(self, name: str, digest: str) -> Flow | None:
        """The flow named ``name`` whose loaded code has ``digest``, if this process holds it."""
        with self._lock:
            return self._versions.get(name, {}).get(digest)

    def names(self) -> list[str]:
        return sorted(self._flows)

    def load_sources(self, sources: list[str], setting: str = "FLUKSIO_FLOWS") -> None:
        """Register every flow found in each module or ``file.py`` (an ``:attr`` suffix picks one).

        ``sources`` are the value of ``setting``, which a failure names: whoever reads "no module named
        'pkg.flows'" at a worker's start must learn where that name came from, and where Python looked.
        """
        for source in sources:
            try:
                flows = load_flows(source)
            except ModuleMissing as exc:
                raise FlowNotFound(
                    f"{setting} names {source!r}, but {exc.module!r} cannot be imported here (not installed, and "
                    f"not under a folder on PYTHONPATH or the working directory {Path.cwd()}): install its "
                    f"package, add the folder that holds {exc.module.split('.')[0]!r} to PYTHONPATH, or name the "
                    f"file in {setting} (path/to/flows.py)") from None
            except FlowNotFound as exc:
                raise FlowNotFound(f"{setting} names {source!r}: {exc}") from None
            for flow in flows:
                self.register(flow)

    def resolve(self, reference: str | Flow) -> Flow:
        """A flow from an object, a registered name, or a ``file.py[:attr]`` / ``module:attr`` reference."""
        if isinstance(reference, Flow):
            return self.register(reference)
        if not isinstance(reference, str) or not reference:
            raise FlowNotFound(f"expected a Flow or a flow reference, got {reference!r}")
        if reference in self._flows:
            return self._flows[reference].flow
        if ":" in reference or reference.endswith(".py"):
            flows = load_flows(reference)
            if len(flows) > 1:
                names = ", ".join(f.name for f in flows)
                raise FlowNotFound(f"{reference} defines several flows ({names}); pick one with {reference}:ATTR")
            return self.register(flows[0])
        return self.get(reference)


def load_flows(source: str) -> list[Flow]:
    """The flows a module or file defines; with ``:attr``, just that one."""
    target, _, attr = source.partition(":")
    if target.endswith(".py") or "/" in target:
        module = _import_file(Path(target))
    else:
        module = _import_module(target)
    if attr:
        flow = getattr(module, attr, None)
        if not isinstance(flow, Flow):
            found = [n for n, v in vars(module).items() if isinstance(v, Flow)]
            raise FlowNotFound(
                f"{target} has no flow named {attr!r} (flows there: {', '.join(found) or 'none'})"
                f"{did_you_mean(attr, found)}"
            )
        return [flow.validate()]
    flows = [value.validate() for value in vars(module).values() if isinstance(value, Flow)]
    if not flows:
        raise FlowNotFound(f"{target} defines no Flow")
    return flows


class ModuleMissing(FlowNotFound):
    """A flow's module is nowhere Python looks (``module``: the one that is missing, ``name`` or a package
    above it)."""

    def __init__(self, message: str, module: str) -> None:
        super().__init__(message)
        self.module = module


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise ModuleMissing(f"no module named {name!r} (not installed, nor under a folder on PYTHONPATH); "
                                "install it, add its folder to PYTHONPATH, or give a file path",
                                exc.name) from None
        raise _import_failed(name, exc) from None
    except FlowError:
        raise
    except Exception as exc:
        raise _import_failed(name, exc) from None


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise FlowNotFound(f"no flow file {path}")
    resolved = path.resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    module_name = f"{FLOWFILE_MODULE_PREFIX}{resolved.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise FlowNotFound(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # Let the file import its siblings, as `python file.py` would.
    sys.path.insert(0, str(resolved.parent))
    try:
        spec.loader.exec_module(module)
    except FlowError:
        sys.modules.pop(module_name, None)
        raise
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        raise _import_failed(str(path), exc, resolved) from None
    finally:
        sys.path.remove(str(resolved.parent))
    return module


def _import_failed(what: str, exc: BaseException, file: Path | None = None) -> FlowNotFound:
    """An import error that names the file and line where it happened, not fluksio's frames."""
    if isinstance(exc, SyntaxError):
        return FlowNotFound(f"cannot import {what}: {exc.filename}:{exc.lineno}: {exc.msg}")
    frames = traceback.extract_tb(exc.__traceback__)
    frame = next((f for f in reversed(frames) if file is None or Path(f.filename) == file), None)
    where = f"{frame.filename}:{frame.lineno}: " if frame else ""
    return FlowNotFound(f"cannot import {what}: {where}{type(exc).__name__}: {exc}")
