"""A node's code identity: its function and what it uses of the project, followed statically.

The run cache keys a node call on this identity (cache/keys.py), not on the flow's whole code digest: edit
the evaluation node and only it (and what its outputs feed, if they change) runs again; edit a helper that
training calls and training runs again. The identity is the sha256 of the text of the top-level statements
the node's function reaches, read from the flow's code package (flows/package.py) — the same files give
the same identity on every machine — by this rule:

* the statement that defines the node's function (for a function defined inside another, or a method, the
  whole top-level statement around it), decorators, default values and annotations included;
* for every name a reached statement uses: the statements of its module that define that name, followed
  through the project's imports (``from .helpers import fit``, ``helpers.fit`` on ``import helpers``, and
  imports inside functions), and the statements that change it in place (``CONFIG["lr"] = 0.1``, a
  decorator that registers into ``REGISTRY``), and so on from each of them: helpers, classes (with all
  their methods), constants and the constants they are computed from;
* what cannot be followed by name falls back to the whole module: a module used as a value
  (``getattr(metrics, name)``, ``vars(helpers)``), an attribute the module does not define, a star import,
  and ``globals()``, ``exec``, ``eval``, ``sys.modules``, ``importlib.import_module`` in a reached statement
  (its own module then counts whole). So the cache may run a node again for nothing, never reuse a result of
  other code;
* every statement of the project that runs when its module is imported for its effects
  (``seed_everything(0)``, ``torch.manual_seed(0)``, ``logging.basicConfig()``), and every data file the
  flow's ``include`` packs, count for every node;
* not followed: installed libraries (their import statements count, their versions do not), the flow's own
  declaration (``flow = Flow(…)``, ``flow.subflow(…)``: the graph is in the key already), and the
  ``if __name__ == "__main__":`` block, but for the names it changes.

A node whose identity cannot be made — a flow without a file (a notebook), a function outside the package,
files edited since the flow was loaded — keeps the flow's whole code digest as its identity
(:func:`node_codes` leaves it out), which is correct, only coarser. A graph rebuilt from its description
(flows/manifest.py) carries each node's identity, worked out where the flow was submitted, as the
attribute :data:`NODE_CODE` of its ``fn``.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import logging
import threading
import weakref
import zipfile
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from fluksio.errors import FluksioError
from fluksio.flows.flow import Flow
from fluksio.flows.imports import imported_files, root_of
from fluksio.flows.package import pack, package_files
from fluksio.flows.statements import WHOLE, Chain, Imported, Kind, Statement, read_module

log = logging.getLogger(__name__)

#: The attribute of a rebuilt node's ``fn`` holding its code identity, as its description carried it.
NODE_CODE = "__fluksio_node_code__"
#: The version of the rule above, in every identity: a change of the rule is a change of every identity.
RULE_VERSION = 1
#: Projects (read code packages) kept per process, by package digest.
KEPT_PROJECTS = 16

#: A top-level statement: the module's path in the package, and its position there.
Place = tuple[str, int]

_projects: OrderedDict[str, Project] = OrderedDict()
_codes: weakref.WeakKeyDictionary[Flow, tuple[tuple[str, int], dict[str, str]]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def node_codes(flow: Flow) -> dict[str, str]:
    """The code identity of each node of ``flow`` that has one (``"sha256:…"``), by node name.

    Worked out from the flow's files once per flow object, and only while they are the files it was loaded
    from (its ``source_digest``): after an edit the process still runs the old code, which the files no
    longer show, and its nodes keep the flow's whole digest. Never raises: a node it cannot work out is left
    out, and so keyed on the flow's whole code.
    """
    carried = {name: getattr(spec.fn, NODE_CODE) for name, spec in flow.nodes.items()
               if isinstance(getattr(spec.fn, NODE_CODE, None), str)}
    if carried or not flow.source_file or not flow.source_digest:
        return carried
    state = (flow.source_digest, len(flow.nodes))
    with _lock:
        known = _codes.get(flow)
    if known is not None and known[0] == state:
        return dict(known[1])
    try:
        codes = _worked_out(flow)
    except Exception:  # a reading this module got wrong must cost cache hits, never a run
        log.warning("flow %r: the code identity of its nodes could not be worked out; they are cached on the "
                    "flow's whole code", flow.name, exc_info=True)
        return {}
    if codes is not None:
        with _lock:
            _codes[flow] = (state, codes)
    return dict(codes or {})


def _worked_out(flow: Flow) -> dict[str, str] | None:
    """Each node's identity; ``None`` when the files are not (or no longer) those the flow was loaded from."""
    assert flow.source_file is not None
    try:
        package = pack(flow.source_file, flow.include, flow.module)
        on_disk = {Path(file).resolve(): path for path, file in package_files(flow.source_file, flow.include)}
        root = root_of(flow.source_file)
        imported = {on_disk[file.resolve()] for file in imported_files(root, Path(flow.source_file).resolve())
                    if file.resolve() in on_disk} if root is not None else set()
    except (OSError, FluksioError):
        return None
    if package.digest != flow.source_digest:
        return None  # edited since the flow was loaded: this process runs code its files no longer hold
    project = _project(package.digest, package.data, imported)
    functions = {name: spec.fn for name, spec in flow.nodes.items() if spec.subflow is None}
    skipped: dict[str, set[str]] = defaultdict(set)
    places: dict[str, Place] = {}
    for name, fn in functions.items():
        place = _place_of(fn, on_disk, project)
        if place is not None:
            places[name] = place
            # The flow objects a node's module holds: their declarations are the graph, in the key already.
            skipped[place[0]] |= {n for n, value in _globals_of(fn).items() if isinstance(value, Flow)}
    return {name: project.identity(place, skipped) for name, place in places.items()}


def _globals_of(fn: Callable[..., Any]) -> dict[str, Any]:
    target = _unwrapped(fn)
    return getattr(target, "__globals__", None) or {}


def _unwrapped(fn: Callable[..., Any]) -> Any:
    try:
        target = inspect.unwrap(fn)
    except ValueError:  # a cycle of __wrapped__
        target = fn
    return getattr(target, "__func__", target)  # a bound method: its function


def _place_of(fn: Callable[..., Any], on_disk: dict[Path, str], project: Project) -> Place | None:
    """The top-level statement of the package that defines ``fn`` (``None``: its code is not in the package)."""
    code = getattr(_unwrapped(fn), "__code__", None)
    if code is None:
        return None
    path = on_disk.get(Path(code.co_filename).resolve())
    statements = project.modules.get(path) if path is not None else None
    if path is None or statements is None:
        return None
    line = code.co_firstlineno  # of a decorated function: its first decorator's line
    for index, statement in enumerate(statements):
        if statement.first_line <= line <= statement.last_line:
            return path, index
    return None


def _project(digest: str, data: bytes, imported: set[str]) -> Project:
    with _lock:
        known = _projects.get(digest)
        if known is not None:
            _projects.move_to_end(digest)
            return known
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for entry in archive.infolist():
            files[entry.filename] = archive.read(entry)
    project = Project.read(files, imported)
    with _lock:
        _projects[digest] = project
        while len(_projects) > KEPT_PROJECTS:
            _projects.popitem(last=False)
    return project


@dataclass
class Project:
    """The modules of one code package, read statement by statement, and who changes what among them."""

    #: Each module's statements, by its path in the package.
    modules: dict[str, tuple[Statement, ...]]
    #: The sha256 of each data file (every file that is not a module the flow imports), by path.
    data: dict[str, str]
    #: The statements of a module that define a name there.
    definers: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    #: The statements (of any module) that change a module's name in place.
    changers: dict[tuple[str, str], set[Place]] = field(default_factory=lambda: defaultdict(set))
    #: Statements that run for their effects when their module is imported: they count for every node.
    effects: set[Place] = field(default_factory=set)
    #: The star imports of each module.
    stars: dict[str, list[tuple[int, Imported]]] = field(default_factory=lambda: defaultdict(list))
    #: Modules that may define names no reading of them shows (``globals()``, ``exec`` at module level).
    dynamic: set[str] = field(default_factory=set)

    @classmethod
    def read(cls, files: dict[str, bytes], imported: set[str]) -> Project:
        modules = {path: read_module(content) for path, content in files.items()
                   if path.endswith(".py") and path in imported}
        data = {path: hashlib.sha256(content).hexdigest() for path, content in files.items() if path not in modules}
        project = cls(modules, data)
        project._index()
        return project

    def _index(self) -> None:
        everything = [(path, index, statement) for path, statements in self.modules.items()
                      for index, statement in enumerate(statements)]
        for path, index, statement in everything:
            if statement.kind is Kind.MAIN:
                continue  # what it binds never exists where the flow is imported
            for name in statement.defines:
                self.definers[(path, name)].append(index)
            self.stars[path] += [(index, i) for i in statement.imports if i.attr == "*"]
            if statement.kind is Kind.EFFECT:
                self.effects.add((path, index))
            if statement.dynamic is not None:
                self.dynamic.add(path)
        for path, index, statement in everything:
            for name in statement.changes:
                sites = self.sites(path, (name,))
                if sites:
                    for site in sites:
                        self.changers[site].add((path, index))
                elif statement.kind is not Kind.MAIN:  # a library's state, changed at import: it may reach anything
                    self.effects.add((path, index))
            # A function that changes a name when it runs; a statement that runs such a function as the module
            # runs (a registering decorator, a base class whose __init_subclass__ registers) changes it too.
            for name in statement.changes_when_called:
                for site in self.sites(path, (name,)):
                    self.changers[site].add((path, index))
            for chain in statement.calls_at_import:
                for module, name in self.sites(path, chain):
                    for definer in self.definers.get((module, name), ()):
                        for changed in self.modules[module][definer].changes_when_called:
                            for site in self.sites(module, (changed,)):
                                self.changers[site].add((path, index))

    def identity(self, start: Place, skipped: dict[str, set[str]] | None = None) -> str:
        """The code identity of the node whose function the statement ``start`` defines."""
        described = {"rule": RULE_VERSION, "code": self.reached(start, skipped), "data": sorted(self.data.items())}
        text = json.dumps(described, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def reached(self, start: Place, skipped: dict[str, set[str]] | None = None) -> list[tuple[str, str]]:
        """``(module, statement text)`` of every statement the node defined at ``start`` reaches, sorted: what
        its identity is made of. ``skipped``: names per module never followed (the flow objects)."""
        follower = _Follower(self, skipped or {})
        for place in sorted({start, *self.effects}):
            follower.include(place)
        follower.run()
        return sorted({(path, self.modules[path][index].text) for path, index in follower.included})

    def defined_at(self, path: str, name: str) -> Place:
        """The (first) statement of module ``path`` that defines ``name``; ``KeyError`` when none does."""
        return path, self.definers[(path, name)][0]

    # -- where names live ---------------------------------------------------------------------------------

    def find(self, path: str, level: int, dotted: str) -> list[str]:
        """The modules of the package that ``from <level dots><dotted> import …`` in module ``path`` may load:
        relative to its package, or for an absolute import from each folder between it and the package's
        top (which of them is on ``sys.path`` depends on how the flow was loaded)."""
        folder = PurePosixPath(path).parent
        if level:
            for _ in range(level - 1):
                if folder == PurePosixPath("."):
                    return []
                folder = folder.parent
            anchors = [folder]
        else:
            anchors = [folder, *folder.parents]
        found: list[str] = []
        for anchor in anchors:
            if not dotted:
                candidates = [anchor / "__init__.py"] if level else []
            else:
                stem = anchor.joinpath(*dotted.split("."))
                candidates = [stem.with_name(stem.name + ".py"), stem / "__init__.py"]
            found += [c.as_posix() for c in candidates if c.as_posix() in self.modules]
        return found

    def submodules(self, path: str, name: str) -> list[str]:
        """Module ``name`` of the package whose ``__init__.py`` is ``path``."""
        if PurePosixPath(path).name != "__init__.py":
            return []
        folder = PurePosixPath(path).parent
        return [c.as_posix() for c in (folder / f"{name}.py", folder / name / "__init__.py")
                if c.as_posix() in self.modules]

    def sites(self, path: str, chain: Chain, depth: int = 0) -> list[tuple[str, str]]:
        """Where the value ``chain`` names in module ``path`` is defined: ``(module, name)`` pairs, through the
        project's imports (a library's name has none)."""
        if depth > len(self.modules) + 8:  # an import cycle
            return []
        name, tail = chain[0], chain[1:]
        found: list[tuple[str, str]] = []
        for index in self.definers.get((path, name), ()):
            imports = [i for i in self.modules[path][index].imports if i.name == name and i.attr != "*"]
            if not imports:
                found.append((path, name))
            for imported in imports:
                for module in self.imported_modules(path, imported):
                    if tail:
                        found += self._site_in_module(module, tail, depth + 1)
                if imported.attr is not None:
                    for base in self.find(path, imported.level, imported.module):
                        found += self.sites(base, (imported.attr, *tail), depth + 1)
        return found

    def _site_in_module(self, module: str, tail: Chain, depth: int) -> list[tuple[str, str]]:
        found = self.sites(module, tail, depth) if self.definers.get((module, tail[0])) else []
        for sub in self.submodules(module, tail[0]):
            if tail[1:]:
                found += self._site_in_module(sub, tail[1:], depth + 1)
        return found

    def imported_modules(self, path: str, imported: Imported) -> list[str]:
        """The modules of the package an import binds its name to (none: it binds a value, or a library)."""
        if imported.attr is None:
            return self.find(path, imported.level, imported.module)
        dotted = f"{imported.module}.{imported.attr}" if imported.module else imported.attr
        return self.find(path, imported.level, dotted)


class _Follower:
    """Follows a node's function through the project: which statements it reaches (see the module's rule)."""

    def __init__(self, project: Project, skipped: dict[str, set[str]]) -> None:
        self.project = project
        self.skipped = skipped
        self.included: set[Place] = set()
        self.whole: set[str] = set()
        self._todo: list[Place] = []
        self._named: dict[tuple[str, str, Chain], bool] = {}

    def include(self, place: Place) -> None:
        if place not in self.included:
            self.included.add(place)
            self._todo.append(place)

    def run(self) -> None:
        while self._todo:
            path, index = self._todo.pop()
            statement = self.project.modules[path][index]
            if statement.dynamic is not None:
                self.whole_module(path)
            for chain in sorted(statement.uses):
                for imported in statement.imports:  # an import inside a function binds the name there
                    if imported.name == chain[0] and imported.attr != "*":
                        self.through(path, imported, chain[1:])
                self.name(path, chain[0], chain[1:])

    def whole_module(self, path: str) -> None:
        if path not in self.whole:
            self.whole.add(path)
            for index in range(len(self.project.modules[path])):
                self.include((path, index))

    def name(self, path: str, name: str, tail: Chain) -> bool:
        """Reach what ``name`` (with the attributes ``tail`` read on it) is in module ``path``; whether the
        module defines it (or may: a star import of a project module counts it whole)."""
        key = (path, name, tail)
        if key in self._named:
            return self._named[key]
        self._named[key] = True  # while following: an import cycle comes back here
        if name in self.skipped.get(path, ()):
            return True
        project = self.project
        definers = project.definers.get((path, name), [])
        for index in definers:
            self.include((path, index))
            for imported in project.modules[path][index].imports:
                if imported.name == name and imported.attr != "*":
                    self.through(path, imported, tail)
        for place in sorted(project.changers.get((path, name), ())):
            self.include(place)
        defined = bool(definers)
        if not defined:  # perhaps brought by a star import: from a module that defines it, or may at run time
            for index, star in project.stars.get(path, ()):
                for module in project.find(path, star.level, star.module):
                    if module in project.dynamic:
                        self.whole_module(module)
                    elif not self.name(module, name, tail):
                        continue
                    self.include((path, index))
                    defined = True
        self._named[key] = defined
        return defined

    def through(self, path: str, imported: Imported, tail: Chain) -> None:
        """Follow an import of module ``path`` to what it binds, with the attributes ``tail`` read on it."""
        project = self.project
        for module in project.imported_modules(path, imported):
            self.module(module, tail)
        if imported.attr is not None:
            for base in project.find(path, imported.level, imported.module):
                if not self.name(base, imported.attr, tail) and not project.submodules(base, imported.attr):
                    self.whole_module(base)  # set by the module at run time (a module __getattr__, globals())

    def module(self, path: str, tail: Chain) -> None:
        """Module ``path`` of the package, used with the attributes ``tail`` read on it (none: used whole)."""
        if not tail or tail[0] == WHOLE:
            self.whole_module(path)
            return
        defined = self.name(path, tail[0], tail[1:])
        submodules = self.project.submodules(path, tail[0])
        for sub in submodules:
            self.module(sub, tail[1:])
        if not defined and not submodules:
            self.whole_module(path)


def read_project(files: dict[str, bytes], imported: Iterable[str] | None = None) -> Project:
    """A project of ``files`` (path → bytes), each ``.py`` file a module unless ``imported`` says which are."""
    return Project.read(files, set(imported) if imported is not None else {p for p in files if p.endswith(".py")})
