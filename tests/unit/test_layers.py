"""The package's layers (docs/architecture.md): imports point from the front doors toward the ground, never back,
and the pure modules never reach Celery, kombu, SQLAlchemy, Redis or Alembic — not even through another
fluksio module.

The check reads the source with ``ast`` (nothing is imported). Each test of the checker itself feeds it
a synthetic package with the violation it must catch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fluksio"

#: Top to bottom. A module may import from its own area and from areas in lower layers; areas that share
#: a layer are siblings and import neither each other nor anything above.
LAYERS: list[set[str]] = [
    {"fluksio"},                                   # the package's own __init__: the public names
    {"cli"},
    {"ui"},
    {"client"},
    {"worker"},
    {"triggers", "driver", "execution"},
    {"runtime"},                                   # the composition root a process shares
    {"runs"},                                      # submit, references, family, lease, ends, metrics
    {"provisioners", "cache", "broker"},
    {"security"},                                  # signatures, trust, TLS: the broker's inbox signs with it
    {"codecs"},                                    # a codec's value is stored as an artifact
    {"placement", "store", "artifacts", "flows", "routing", "messages"},
    {"failures", "outage"},                        # why a connection failed, in words; notices during an outage
    {"settings", "schemas"},
    {"constants", "errors", "clock"},              # names, the error tree, the one clock (aware UTC)
]

#: The only areas that import Celery or kombu (docs/architecture.md): the rest of the package is plain Python
#: over the run store, the books and the artifact store, whatever carries the messages.
CELERY_AREAS = frozenset({"driver", "execution", "worker", "broker", "security", "triggers"})

#: Libraries the pure modules must never load.
FORBIDDEN = frozenset({"celery", "kombu", "sqlalchemy", "redis", "alembic"})

#: Modules with no Celery, no SQL, no Redis: unit-tested in microseconds (docs/architecture.md).
PURE = [
    "fluksio.flows.flow", "fluksio.flows.node", "fluksio.flows.validation", "fluksio.flows.source",
    "fluksio.flows.imports", "fluksio.flows.statements", "fluksio.flows.node_code",
    "fluksio.placement.books", "fluksio.placement.clamp", "fluksio.placement.backend", "fluksio.placement.memory",
    "fluksio.placement.placer", "fluksio.placement.turns", "fluksio.placement.wakeups",
    "fluksio.driver.walk", "fluksio.driver.retrying", "fluksio.driver.verdict", "fluksio.driver.rows",
    "fluksio.driver.restore", "fluksio.driver.waitlists",
    "fluksio.cache.keys", "fluksio.runs.ends", "fluksio.messages", "fluksio.routing", "fluksio.schemas",
    "fluksio.store.rows",
]


@dataclass(frozen=True)
class Imports:
    """What one module imports: fluksio modules and other top-level packages, eagerly (at import time) and
    lazily (inside a function). Imports under ``if TYPE_CHECKING:`` are for type checkers only."""

    eager: frozenset[str]
    lazy: frozenset[str]


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_imports(root: Path, path: Path, modules: set[str]) -> Imports:
    tree = ast.parse(path.read_text(), filename=str(path))
    eager: set[str] = set()
    lazy: set[str] = set()
    package = module_name(root, path) if path.name == "__init__.py" else module_name(root, path).rpartition(".")[0]

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - child.level + 1] + ([base] if base
                                                                                                       else []))
                # ``from fluksio.store import run_rows`` imports the module fluksio.store.run_rows.
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in child.names]
            (lazy if nested else eager).update(names)
            visit(child, nested)

    visit(tree, False)
    return Imports(frozenset(eager), frozenset(lazy))


def scan(root: Path) -> dict[str, Imports]:
    files = [p for p in root.rglob("*.py") if "migrations" not in p.parts]
    modules = {module_name(root, p) for p in files}
    return {module_name(root, p): read_imports(root, p, modules) for p in files}


def area_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(area: str) -> int:
    for index, areas in enumerate(LAYERS):
        if area in areas:
            return index
    raise AssertionError(f"package area {area!r} is in no layer of tests/unit/test_layers.py: add it")


def upward_imports(graph: dict[str, Imports]) -> list[str]:
    """Every import of a fluksio module from a higher layer, or from a sibling area."""
    found = []
    for module, imports in sorted(graph.items()):
        here = area_of(module)
        for target in sorted(imports.eager | imports.lazy):
            if not target.startswith("fluksio.") and target != "fluksio":
                continue
            there = area_of(target)
            if there != here and layer_of(there) <= layer_of(here) and here != "fluksio":
                found.append(f"{module} imports {target} ({there} is not below {here})")
    return found


def parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def impure_reach(graph: dict[str, Imports], module: str) -> list[str]:
    """The forbidden libraries ``module`` loads, each with the chain of imports that gets there."""
    found = [f"{module} imports {lib}" for lib in sorted(imports_of_libraries(graph[module].eager |
                                                                              graph[module].lazy))]
    seen = {module}
    frontier = [(module, [module])]
    while frontier:
        current, path = frontier.pop()
        for target in sorted(graph[current].eager | set(parents(current))):
            if target not in graph or target in seen:
                continue
            seen.add(target)
            chain = [*path, target]
            found += [f"{' -> '.join(chain)} imports {lib}" for lib in sorted(imports_of_libraries(
                graph[target].eager))]
            frontier.append((target, chain))
    return found


def celery_outside_its_areas(graph: dict[str, Imports]) -> list[str]:
    """Every module outside :data:`CELERY_AREAS` that imports Celery or kombu itself (eagerly or lazily)."""
    return [f"{module} imports {library}" for module, imports in sorted(graph.items())
            if area_of(module) not in CELERY_AREAS
            for library in sorted({name.split(".")[0] for name in imports.eager | imports.lazy} & {"celery", "kombu"})]


def import_cycles(graph: dict[str, Imports]) -> list[list[str]]:
    """Groups of modules that import each other, directly or around a loop, lazy imports included: an import
    inside a function only hides a cycle from the interpreter, not from the reader (Tarjan's algorithm)."""
    edges = {module: sorted(t for t in imports.eager | imports.lazy if t in graph and t != module)
             for module, imports in graph.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for target in edges[module]:
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            group = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(edges):
        if module not in order:
            visit(module)
    return sorted(cycles)


def imports_of_libraries(names: frozenset[str] | set[str]) -> set[str]:
    return {name.split(".")[0] for name in names} & FORBIDDEN


# -- the package ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def package() -> dict[str, Imports]:
    return scan(PACKAGE)


def test_no_import_points_up_the_layout(package: dict[str, Imports]) -> None:
    assert upward_imports(package) == []


@pytest.mark.parametrize("module", PURE)
def test_the_pure_modules_reach_neither_celery_nor_sql_nor_redis(package: dict[str, Imports], module: str) -> None:
    assert module in package, f"{module} is listed as pure but does not exist"
    assert impure_reach(package, module) == []


def test_only_the_celery_areas_import_celery_or_kombu(package: dict[str, Imports]) -> None:
    assert celery_outside_its_areas(package) == []


def test_no_modules_import_each_other(package: dict[str, Imports]) -> None:
    assert import_cycles(package) == []


@pytest.mark.parametrize("document", ["docs/architecture.md", "README.md"])
def test_the_architecture_documents_name_every_area(package: dict[str, Imports], document: str) -> None:
    """A package or top-level module added without a word in the documents that map the tree is caught here."""
    text = (PACKAGE.parent / document).read_text()
    areas = {area_of(module) for module in package} - {"fluksio"}
    unnamed = sorted(area for area in areas if f"`{area}/`" not in text and f"{area}.py`" not in text)
    assert unnamed == [], f"{document} does not name {', '.join(unnamed)}"


def test_every_area_of_the_package_has_a_layer(package: dict[str, Imports]) -> None:
    for module in package:
        layer_of(area_of(module))


# -- the checker catches what it is for -----------------------------------------------------------------


def synthetic(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "fluksio"
    for name, source in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        if path.parent != root and not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text("")
    return root


def test_a_pure_module_importing_sqlalchemy_directly_is_caught(tmp_path: Path) -> None:
    root = synthetic(tmp_path, {"flows/flow.py": "import sqlalchemy\n"})
    assert impure_reach(scan(root), "fluksio.flows.flow") == ["fluksio.flows.flow imports sqlalchemy"]


def test_a_pure_module_reaching_celery_through_another_fluksio_module_is_caught(tmp_path: Path) -> None:
    root = synthetic(tmp_path, {
        "driver/walk.py": "from fluksio.flows.helper import thing\n",
        "flows/helper.py": "from celery import Celery\nthing = 1\n",
    })
    assert impure_reach(scan(root), "fluksio.driver.walk") == [
        "fluksio.driver.walk -> fluksio.flows.helper imports celery"]


def test_a_package_init_that_imports_sql_taints_every_module_under_it(tmp_path: Path) -> None:
    root = synthetic(tmp_path, {"store/__init__.py": "from sqlalchemy import select\n", "store/rows.py": "x = 1\n"})
    assert impure_reach(scan(root), "fluksio.store.rows") == ["fluksio.store.rows -> fluksio.store imports sqlalchemy"]


def test_an_import_for_type_checkers_only_does_not_count(tmp_path: Path) -> None:
    root = synthetic(tmp_path, {"flows/flow.py": "from typing import TYPE_CHECKING\n"
                                                 "if TYPE_CHECKING:\n    import celery\n"})
    assert impure_reach(scan(root), "fluksio.flows.flow") == []


def test_an_import_pointing_up_the_layout_is_caught(tmp_path: Path) -> None:
    root = synthetic(tmp_path, {"store/run_rows.py": "from fluksio.client import connect\n", "client.py": ""})
    assert upward_imports(scan(root)) == [
        "fluksio.store.run_rows imports fluksio.client (client is not below store)"]


def test_siblings_importing_each_other_are_caught(tmp_path: Path) -> None:
    root = synthetic(tmp_path, {"driver/loop.py": "from fluksio.execution import call\n", "execution/call.py": ""})
    assert upward_imports(scan(root)) == [
        "fluksio.driver.loop imports fluksio.execution.call (execution is not below driver)"]


def test_celery_imported_outside_its_areas_is_caught(tmp_path: Path) -> None:
    root = synthetic(tmp_path, {"runs/submit.py": "def send():\n    from kombu import Connection\n",
                                "broker/transport.py": "import kombu\n"})
    assert celery_outside_its_areas(scan(root)) == ["fluksio.runs.submit imports kombu"]


def test_a_cycle_closed_by_an_import_inside_a_function_is_caught(tmp_path: Path) -> None:
    root = synthetic(tmp_path, {
        "execution/call.py": "from fluksio.execution.isolated import run_in_child\n",
        "execution/isolated.py": "def run():\n    from fluksio.execution.call import run_here\n",
    })
    assert import_cycles(scan(root)) == [["fluksio.execution.call", "fluksio.execution.isolated"]]
