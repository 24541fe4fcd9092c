"""A module of a flow's project read as its top-level statements: what each defines, uses and changes.

A node's code identity (flows/node_code.py) is the text of the statements its function reaches by name,
so a module is read here once into the facts that following needs, with ``ast``, never by running it:

* what a statement **defines** at module level (a ``def``, a ``class``, an import, an assignment to plain
  names, what a ``try``/``if`` block binds);
* every name it **uses**, with the attributes read on it (``helpers.fit`` is ``("helpers", "fit")``), and the
  imports it makes at any depth (``from .helpers import fit`` inside a function binds ``fit`` there too);
* what it **changes** without defining it: ``CONFIG["lr"] = 0.1`` and ``REGISTRY.update(…)`` at module
  level change ``CONFIG`` and ``REGISTRY``; a function whose body does so (or declares ``global X``) changes
  them whenever it runs, which for a decorator is when the module runs;
* what it **calls while the module runs** (decorators, base classes, calls outside function bodies), so
  that ``@register def model_a`` counts as a change of what ``register`` changes;
* whether it uses a name that no reading can follow (``globals()``, ``exec``, ``sys.modules``,
  ``importlib.import_module``, ``getattr`` with a computed name): then its whole module counts;
* its **kind**: a definition (reached by name), an effect (``seed_everything(0)``, ``logging.basicConfig()``
  at module level: it runs whenever the module is imported, so it counts for every node), or the
  ``if __name__ == "__main__":`` block (it never runs where the flow is imported: it counts only for the
  names it changes).

Pure: ``ast`` only.
"""

from __future__ import annotations

import ast
import enum
import re
from dataclasses import dataclass

#: A name with the attributes read on it, outermost last: ``("helpers", "fit")``; ``("x",)`` for a bare use.
Chain = tuple[str, ...]

#: Calls that read or run names no reading of the source can follow: the whole module they are in counts.
DYNAMIC_CALLS = frozenset({"globals", "locals", "eval", "exec", "compile", "__import__", "import_module"})
#: Calls whose second argument names an attribute: with a computed name, their first argument is used whole.
ATTRIBUTE_CALLS = frozenset({"getattr", "setattr", "delattr", "hasattr"})
#: Calls that use their argument's namespace whole (``vars(helpers)[name]``); without one, the module's.
NAMESPACE_CALLS = frozenset({"vars", "dir"})
#: An attribute no module defines: ``("pkg", "helpers", WHOLE)`` uses module ``pkg.helpers`` whole.
WHOLE = "__dict__"
#: Methods that change the container they are called on: a function body calling one on a module-level
#: name changes it (any method counts at module level, where a statement is nothing but its call).
CHANGING_METHODS = frozenset({
    "append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "remove", "discard",
    "clear", "sort", "reverse", "register", "__setitem__", "__delitem__",
})
#: A line as Python counts them (``str.splitlines`` also breaks at form feeds, which ``ast`` does not count).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


class Kind(enum.Enum):
    #: Reached by the names it defines (or changes).
    DEFINITION = "definition"
    #: Runs for its effects whenever the module is imported: counts for every node of the flow.
    EFFECT = "effect"
    #: ``if __name__ == "__main__":``: never runs where the flow is imported; counts for the names it changes.
    MAIN = "main"


@dataclass(frozen=True)
class Imported:
    """A name one import binds: ``import a.b`` binds ``a`` to module ``a``; ``import a.b as c`` binds ``c`` to
    module ``a.b``; ``from .m import x as y`` binds ``y`` to ``x`` of ``.m`` (``attr``, ``"*"`` for a star)."""

    name: str
    level: int
    module: str
    #: The name taken from the module (``None``: the name is bound to the module itself).
    attr: str | None


@dataclass(frozen=True)
class Statement:
    """One top-level statement of a module, as following needs it."""

    #: Its source text, decorators included: what a node's code identity is made of.
    text: str
    kind: Kind
    #: Module-level names it binds.
    defines: frozenset[str]
    #: Every name it mentions, each with the attributes read on it.
    uses: frozenset[Chain]
    #: Every import in it, at any depth.
    imports: tuple[Imported, ...]
    #: Module-level names it changes when the module runs, other than by binding them.
    changes: frozenset[str]
    #: Names its function (or class) bodies change when they run.
    changes_when_called: frozenset[str]
    #: What it calls while the module runs: decorators, base classes, calls outside function bodies.
    calls_at_import: frozenset[Chain]
    #: Why following it by name is not enough (``"globals()"``), or ``None``.
    dynamic: str | None
    #: Its lines in the file, the first decorator's to the last (1-based, inclusive).
    first_line: int
    last_line: int


def read_module(source: bytes) -> tuple[Statement, ...]:
    """The top-level statements of ``source``; a file that does not parse is one effect: all of it counts."""
    lines = _LINE.findall(source.decode("utf-8-sig", "replace"))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return (Statement("".join(lines), Kind.EFFECT, frozenset(), frozenset(), (), frozenset(), frozenset(),
                          frozenset(), None, 1, len(lines)),)
    return tuple(_statement(node, lines) for node in tree.body)


def _statement(node: ast.stmt, lines: list[str]) -> Statement:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    last = node.end_lineno or node.lineno
    uses = _Uses()
    uses.visit(node)
    return Statement(
        text="".join(lines[first - 1:last]), kind=_kind(node), defines=frozenset(_defines(node)),
        uses=frozenset(uses.chains), imports=tuple(uses.imports), changes=frozenset(_changes(node)),
        changes_when_called=frozenset(_changed_in_bodies(node)), calls_at_import=frozenset(_calls_at_import(node)),
        dynamic=uses.dynamic, first_line=first, last_line=last,
    )


# -- what a statement is ------------------------------------------------------------------------------------


def _kind(node: ast.stmt) -> Kind:
    if _is_main_guard(node):
        return Kind.MAIN
    if _is_definition(node):
        return Kind.DEFINITION
    if isinstance(node, _COMPOUND):
        # A block of definitions (`try: import ujson as json` / `except ImportError: import json`) defines;
        # one that does anything else runs for it.
        harmless = (*_COMPOUND, ast.Pass, ast.Raise, ast.Assert)
        return Kind.DEFINITION if all(_is_definition(child) or _is_docstring(child) or isinstance(child, harmless)
                                      for child in _inner_statements(node)) else Kind.EFFECT
    if _is_docstring(node) or isinstance(node, (ast.Pass, ast.Global, ast.Nonlocal, ast.Assert)):
        return Kind.DEFINITION  # defines nothing: never reached
    if _changed_roots(node) is not None:
        return Kind.DEFINITION  # a change of names it roots in (see _changes): reached through them
    return Kind.EFFECT


_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
             *((ast.TryStar,) if hasattr(ast, "TryStar") else ()), ast.Match)
_DEFINING = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
             *((ast.TypeAlias,) if hasattr(ast, "TypeAlias") else ()))


def _is_definition(node: ast.stmt) -> bool:
    if isinstance(node, _DEFINING):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return all(_plain_names(target) is not None for target in targets)
    if isinstance(node, ast.Delete):
        return all(isinstance(target, ast.Name) for target in node.targets)
    return False


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare) or len(node.test.ops) != 1:
        return False
    sides = [node.test.left, *node.test.comparators]
    return (isinstance(node.test.ops[0], ast.Eq)
            and any(isinstance(side, ast.Name) and side.id == "__name__" for side in sides)
            and any(isinstance(side, ast.Constant) and side.value == "__main__" for side in sides))


def _inner_statements(node: ast.AST) -> list[ast.stmt]:
    """The statements of a block, at any depth, but not those of the functions and classes in it."""
    found: list[ast.stmt] = []
    todo = [node]
    while todo:
        current = todo.pop()
        for child in ast.iter_child_nodes(current):
            if isinstance(child, ast.stmt):
                found.append(child)
                if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    todo.append(child)
            elif isinstance(child, (ast.excepthandler, ast.match_case)):
                todo.append(child)
    return found


def _plain_names(target: ast.expr) -> list[str] | None:
    """The names an assignment target binds, when it binds nothing but names (``a, *b = …``)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _plain_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        names: list[str] = []
        for element in target.elts:
            inner = _plain_names(element)
            if inner is None:
                return None
            names += inner
        return names
    return None


def _defines(node: ast.stmt) -> set[str]:
    """The module-level names a statement binds (a block's: every name bound in it, outside function bodies)."""
    found: set[str] = set()
    for each in [node, *(_inner_statements(node) if isinstance(node, _COMPOUND) else ())]:
        if isinstance(each, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(each.name)
        elif isinstance(each, (ast.Import, ast.ImportFrom)):
            found |= {imported.name for imported in _imported(each) if imported.attr != "*"}
        elif hasattr(ast, "TypeAlias") and isinstance(each, ast.TypeAlias):
            found.add(each.name.id)
        elif isinstance(each, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.With,
                               ast.AsyncWith, ast.Delete)):
            found |= {n.id for n in _walk_outside_bodies(each) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, (ast.Store, ast.Del))}
    if isinstance(node, _COMPOUND):  # `except E as e`, `case Point(x=x)`, walrus: whatever it stores
        found |= {n.id for n in _walk_outside_bodies(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        found |= {h.name for h in _walk_outside_bodies(node) if isinstance(h, ast.ExceptHandler) and h.name}
        found |= {n for p in _walk_outside_bodies(node) for n in _pattern_names(p)}
    elif isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)):  # `(x := f())` at module level
        found |= {n.target.id for n in _walk_outside_bodies(node) if isinstance(n, ast.NamedExpr)}
    return found


def _pattern_names(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []


def _walk_outside_bodies(node: ast.AST) -> list[ast.AST]:
    """``ast.walk``, but not into the bodies of functions, lambdas and classes (their names are their own)."""
    found: list[ast.AST] = []
    todo = [node]
    while todo:
        current = todo.pop()
        found.append(current)
        if current is not node and isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                                        ast.ClassDef)):
            continue
        todo += ast.iter_child_nodes(current)
    return found


# -- what it changes ----------------------------------------------------------------------------------------


def _root(node: ast.expr) -> str | None:
    """The name an attribute or item chain starts from: ``X`` of ``X.a[k].b``."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _changed_roots(node: ast.stmt) -> set[str] | None:
    """The names a module-level statement changes in place (``X[k] = v``, ``X.a = v``, ``del X[k]``, a method
    called on ``X``), when that is all it does; ``None`` when it does something else."""
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete)):
        targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target])
        roots: set[str] = set()
        for target in targets:
            if _plain_names(target) is not None:
                roots |= set(_plain_names(target) or ())
                continue
            root = _root(target)
            if root is None:
                return None
            roots.add(root)
        return roots
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        root = _method_root(node.value.func)
        return {root} if root is not None else None
    return None


def _method_root(func: ast.expr) -> str | None:
    """``X`` when ``func`` is a method of ``X`` (``X.update``, ``X.node(…)``, ``X[k].append``); ``None`` for a
    plain call (``seed_everything``, ``make()()``), which may change anything."""
    node, parent = func, None
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        parent = node
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) and isinstance(parent, (ast.Attribute, ast.Subscript)) else None


def _changes(node: ast.stmt) -> set[str]:
    if _is_definition(node):
        return set()
    if _is_main_guard(node):  # what it could change: any name it mentions
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    roots = _changed_roots(node)
    return roots or set()


def _changed_in_bodies(node: ast.stmt) -> set[str]:
    """Names the function bodies of a ``def`` or ``class`` change when they run: ``global X`` declared there,
    items or attributes stored on ``X``, a changing method called on ``X``."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return set()
    found: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Global):
            found |= set(inner.names)
        elif isinstance(inner, (ast.Subscript, ast.Attribute)) and isinstance(inner.ctx, (ast.Store, ast.Del)):
            root = _root(inner.value)
            if root is not None:
                found.add(root)
        elif (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
              and inner.func.attr in CHANGING_METHODS):
            root = _root(inner.func.value)
            if root is not None:
                found.add(root)
    found.discard("self")
    found.discard("cls")
    return found


def _calls_at_import(node: ast.stmt) -> set[Chain]:
    """What a statement calls while its module runs: a definition's decorators, defaults and bases, and every
    call outside function bodies."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        evaluated: list[ast.AST] = [*node.decorator_list, *node.args.defaults,
                                    *(d for d in node.args.kw_defaults if d is not None)]
        called = [*node.decorator_list]
    elif isinstance(node, ast.ClassDef):
        evaluated = [*node.decorator_list, *node.bases, *(k.value for k in node.keywords),
                     *(s for s in node.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))]
        called = [*node.decorator_list, *node.bases]
    else:
        evaluated, called = [node], []
    found: set[Chain] = set()
    for expression in called:
        target = expression.func if isinstance(expression, ast.Call) else expression
        chain = _chain(target)
        if chain:
            found.add(chain)
    for part in evaluated:
        for inner in _walk_outside_bodies(part):
            if isinstance(inner, ast.Call):
                chain = _chain(inner.func)
                if chain:
                    found.add(chain)
    return found


def _chain(node: ast.expr) -> Chain | None:
    """``("registry", "register")`` for ``registry.register``; ``None`` for anything but a dotted name."""
    attributes: list[str] = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return (node.id, *reversed(attributes))


# -- what it uses -------------------------------------------------------------------------------------------


class _Uses(ast.NodeVisitor):
    """Every name a statement mentions with the attributes read on it, its imports, and what defeats following."""

    def __init__(self) -> None:
        self.chains: set[Chain] = set()
        self.imports: list[Imported] = []
        self.dynamic: str | None = None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = _chain(node)
        if chain is None:
            self.generic_visit(node)
            return
        self.chains.add(chain)
        if chain[:2] == ("sys", "modules"):
            self._dynamic("sys.modules")

    def visit_Name(self, node: ast.Name) -> None:
        self.chains.add((node.id,))

    def visit_Import(self, node: ast.Import) -> None:
        self.imports += _imported(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.imports += _imported(node)

    def visit_Call(self, node: ast.Call) -> None:
        chain = _chain(node.func)
        called = chain[-1] if chain else None
        arguments: list[ast.AST] = [*node.args, *node.keywords]
        if called in DYNAMIC_CALLS:
            self._dynamic(f"{called}()")
        elif called in NAMESPACE_CALLS:
            if not node.args:
                self._dynamic(f"{called}()")
            elif self._whole(node.args[0]):  # `vars(helpers)`: all of helpers is used, not one attribute
                arguments.remove(node.args[0])
        elif called in ATTRIBUTE_CALLS and len(node.args) >= 2:
            owner, name = node.args[0], node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                owner_chain = _chain(owner)
                if owner_chain:  # `getattr(helpers, "fit")` reads helpers.fit
                    self.chains.add((*owner_chain, name.value))
                    arguments.remove(owner)
            elif self._whole(owner):  # `getattr(metrics, name)`: any attribute of metrics may be read
                arguments.remove(owner)
        self.visit(node.func)
        for argument in arguments:
            self.visit(argument)

    def visit_arg(self, node: ast.arg) -> None:
        self._annotation(node.annotation)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._annotation(node.returns)
        self.generic_visit(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._annotation(node.returns)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._annotation(node.annotation)
        self.generic_visit(node)

    def _annotation(self, annotation: ast.expr | None) -> None:
        """A string annotation (``"Config"``) names what pydantic validates a parameter into: read it too."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                self.visit(ast.parse(annotation.value, mode="eval"))
            except SyntaxError:
                pass

    def _whole(self, node: ast.expr) -> bool:
        """Note ``node`` as used whole (any attribute of it may be read), if it is a dotted name."""
        chain = _chain(node)
        if chain is None:
            return False
        # A bare name is a whole use already; on a dotted one, an attribute no module defines says the same.
        self.chains.add(chain if len(chain) == 1 else (*chain, WHOLE))
        return True

    def _dynamic(self, why: str) -> None:
        self.dynamic = self.dynamic or why


def _imported(node: ast.Import | ast.ImportFrom) -> list[Imported]:
    if isinstance(node, ast.Import):
        return [Imported(alias.asname, 0, alias.name, None) if alias.asname
                else Imported(alias.name.partition(".")[0], 0, alias.name.partition(".")[0], None)
                for alias in node.names]
    return [Imported(alias.asname or alias.name, node.level, node.module or "", alias.name) for alias in node.names]
