"""A flow used as a node of another: each call of the node is a child run of the inner flow. Pure.

``search.subflow(train, name="trial", map={"lr": "lrs"}, provides={"accuracy": "accuracies"})`` adds a
node ``trial`` whose calls are runs of ``train``. Each input of the child is filled, in this order, from
a ``map`` element, from ``params`` (a constant, or ``Message("name")`` for a parent message of another
name), or from the parent's message of the same name; an input that nothing fills keeps its default, and
one without a default is a :class:`~fluksio.errors.FlowError` when the parent is validated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from fluksio.errors import FlowError, did_you_mean
from fluksio.flows.node import NodeSpec, check_identifier

if TYPE_CHECKING:
    from fluksio.flows.flow import Flow


@dataclass(frozen=True)
class SubflowCall:
    """What makes a node's calls child runs (``NodeSpec.subflow``): the flow each runs, what the parent takes
    from a child's result and what each child is given as constants."""

    flow: Flow
    #: ``(parent message, child output)`` for each message the node provides.
    outputs: tuple[tuple[str, str], ...]
    #: ``(child input, value)`` of the inputs ``params`` gives as constants.
    constants: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Message:
    """In ``subflow(params=...)``: fill the child's input from the parent's message ``name``."""

    name: str


def _never_called(**_: Any) -> None:  # pragma: no cover - a subflow node is driven, never called
    raise FlowError("a subflow node is run as a child run, not called")


def make_subflow(parent: str, child: Flow, *, name: str | None, provides: Mapping[str, str] | Sequence[str] | None,
                 mapped: Mapping[str, str] | None, when: str | None, unless: str | None,
                 params: Mapping[str, Any] | None, max_parallel: int | None) -> NodeSpec:
    """The node of ``parent`` whose calls are child runs of ``child`` (see the module's docstring)."""
    node_name = check_identifier("node name", name or child.name.replace("-", "_").replace(".", "_"),
                                 f"flow {parent!r}")
    where = f"subflow node {node_name!r} of flow {parent!r}"
    outputs = _outputs(child, provides, where)
    mapping = dict(mapped or {})
    constants: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    for input_name, value in (params or {}).items():
        if input_name not in child.inputs:
            raise FlowError(f"{where}: params names {input_name!r}, which is not an input of flow {child.name!r} "
                            f"(its inputs: {', '.join(child.inputs) or 'none'})"
                            f"{did_you_mean(input_name, child.inputs)}")
        if isinstance(value, Message):
            renamed[input_name] = check_identifier("message", value.name, where)
        else:
            constants[input_name] = value
    for input_name, message in mapping.items():
        if input_name not in child.inputs:
            raise FlowError(f"{where}: map key {input_name!r} is not an input of flow {child.name!r} (its inputs: "
                            f"{', '.join(child.inputs) or 'none'}){did_you_mean(input_name, child.inputs)}")
        check_identifier("mapped message", message, where)
    filled = [name for name in child.inputs if name not in constants]
    requires = tuple(mapping.get(name) or renamed.get(name) or name for name in filled)
    # Inputs filled only by a same-named parent message, when the child has a default for them: passed if
    # the parent has such a message (see resolve), else left to the child's default.
    optional = frozenset(name for name in filled if name not in mapping and name not in renamed
                         and not child.inputs[name].required)
    if max_parallel is not None and not mapping:
        raise FlowError(f"{where}: max_parallel caps how many child runs of a mapped subflow run at once; the "
                        "node has no map=")
    return NodeSpec(name=node_name, fn=_never_called, requires=requires, provides=tuple(outputs.values()),
                    params=tuple(filled), optional=optional, map=tuple((k, v) for k, v in mapping.items()),
                    when=when, unless=unless, max_parallel=max_parallel, cache=False,
                    subflow=SubflowCall(child, outputs=tuple((message, output) for output, message in outputs.items()),
                                        constants=tuple(constants.items())))


def _outputs(child: Flow, provides: Mapping[str, str] | Sequence[str] | None, where: str) -> dict[str, str]:
    """Child output → parent message; a list keeps the names as they are (default: every declared output)."""
    if provides is None:
        provides = list(child.outputs or [])
    pairs = dict(provides) if isinstance(provides, Mapping) else {name: name for name in provides}
    made = set(child.result_messages)
    for output, message in pairs.items():
        if output not in made:
            raise FlowError(f"{where}: flow {child.name!r} has no output {output!r} (its outputs: "
                            f"{', '.join(sorted(made)) or 'none'})")
        check_identifier("provided message", message, where)
    return pairs


def resolve(spec: NodeSpec, providers: Mapping[str, str]) -> NodeSpec:
    """The subflow node as the parent's graph has it: inputs with a default and no same-named parent message
    are dropped (the child keeps its default), the rest stay required (and are validated as such)."""
    keep = [i for i, message in enumerate(spec.requires) if message not in spec.optional or message in providers]
    if len(keep) == len(spec.requires):
        return spec
    return replace(spec, requires=tuple(spec.requires[i] for i in keep), params=tuple(spec.params[i] for i in keep))


def containing_cycle(parent: Flow, child: Flow) -> list[str]:
    """``[parent, …, parent]`` when ``child`` is ``parent`` or contains it through its subflows, else ``[]``."""
    stack: list[tuple[Flow, list[str]]] = [(child, [parent.name, child.name])]
    while stack:
        flow, path = stack.pop()
        if flow is parent:
            return path
        for node in flow.nodes.values():
            if node.subflow is not None:
                stack.append((node.subflow.flow, [*path, node.subflow.flow.name]))
    return []
