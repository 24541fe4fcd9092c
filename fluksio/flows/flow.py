"""``Flow``: a named graph of nodes with declared inputs and outputs."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from fluksio.constants import MAX_NAME_LENGTH
from fluksio.errors import FlowError
from fluksio.flows.annotations import adapter_for
from fluksio.flows.node import (
    NODE_OPTIONS,
    NodeOptions,
    NodeSpec,
    check_identifier,
    make_node,
    refuse_unknown_options,
    with_input_types,
)
from fluksio.flows.source import snapshot
from fluksio.flows.subflow import containing_cycle, make_subflow
from fluksio.flows.subflow import resolve as resolve_subflow
from fluksio.flows.validation import providers_of, topological_order, validate_graph
from fluksio.schemas import Resources

#: Flow names appear in queue names, CLI arguments and Flower: keep them plain.
FLOW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_MISSING: Any = object()


@dataclass(frozen=True)
class InputSpec:
    """A declared flow input: its type (checked at submit) and optional default."""

    name: str
    type: Any
    default: Any = _MISSING

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    @property
    def type_name(self) -> str:
        return getattr(self.type, "__name__", None) or str(self.type)

    def adapter(self) -> TypeAdapter[Any]:
        """The input's validator (made once per type); a class pydantic knows nothing of is an isinstance check."""
        return adapter_for(self.type, f"input {self.name!r}")


def check_include(flow: str, include: Sequence[str]) -> tuple[str, ...]:
    """The data-file globs of ``Flow(include=...)``: relative, inside the flow's folder."""
    if isinstance(include, str):
        include = [include]
    globs = tuple(include)
    for pattern in globs:
        if (not isinstance(pattern, str) or not pattern or pattern.startswith(("/", "~"))
                or ".." in pattern.replace("\\", "/").split("/")):
            raise FlowError(f"flow {flow!r}: include={pattern!r} is not a glob relative to the flow's file; "
                            "give paths like 'configs/*.yaml' or 'data/**/*.csv' below the flow's folder")
    return globs


class Flow:
    """A graph of Python functions.

    ``inputs`` maps each parameter name to its type, or to ``(type, default)``;
    ``outputs`` names the messages that make up the run's result (all messages
    when omitted); ``include`` names data files (globs relative to the flow's file,
    like ``"configs/*.yaml"``) that travel with its code package (flows/package.py).
    """

    def __init__(
        self,
        name: str,
        inputs: dict[str, Any] | None = None,
        outputs: Sequence[str] | None = None,
        include: Sequence[str] = (),
        *,
        _defined_in: tuple[str, str | None, str | None] | None = None,
    ) -> None:
        if not isinstance(name, str) or not FLOW_NAME.match(name) or len(name) > MAX_NAME_LENGTH:
            raise FlowError(f"flow name {name!r} is not valid; use up to {MAX_NAME_LENGTH} letters, digits, '_', "
                            "'-' or '.'")
        self.name = name
        self.inputs: dict[str, InputSpec] = {}
        for input_name, spec in (inputs or {}).items():
            check_identifier("input", input_name, f"flow {name!r}")
            if isinstance(spec, tuple):
                if len(spec) != 2:
                    raise FlowError(f"flow {name!r}: input {input_name!r} must be a type or (type, default)")
                self.inputs[input_name] = InputSpec(input_name, spec[0], spec[1])
            else:
                self.inputs[input_name] = InputSpec(input_name, spec)
            try:
                self.inputs[input_name].adapter()
            except Exception as exc:  # pydantic raises several kinds for unusable types
                raise FlowError(f"flow {name!r}: input {input_name!r} has an unusable type {spec!r}: {exc}") from None
        if isinstance(outputs, str):
            outputs = [outputs]
        self.outputs: list[str] | None = list(outputs) if outputs is not None else None
        for output in self.outputs or []:
            check_identifier("output", output, f"flow {name!r}")
        self.include: tuple[str, ...] = check_include(name, include)
        self.nodes: dict[str, NodeSpec] = {}
        # Where the flow was defined: the code digest and the registry need it.
        if _defined_in is None:
            caller = sys._getframe(1).f_globals
            _defined_in = (caller.get("__name__", "__main__"), caller.get("__file__"), None)
        self.module: str = _defined_in[0]
        self.source_file: str | None = _defined_in[1]
        #: The digest of the flow's file and what it imports, now, while its module runs: the code loaded,
        #: which a later edit of the files does not change (``None`` without a file; see flows/source.py).
        self.source_digest: str | None = _defined_in[2] or snapshot(self.source_file, self.include)
        self._providers: dict[str, str] | None = None

    @classmethod
    def described(cls, name: str, inputs: dict[str, Any], outputs: Sequence[str] | None, *,
                  code_digest: str | None) -> Flow:
        """A flow rebuilt from its description (flows/manifest.py), not from a module: it has no file, and
        its code is the package ``code_digest`` names, which this process never imports."""
        return cls(name, inputs, outputs, _defined_in=("fluksio.flows.manifest", None, code_digest))

    def node(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        provides: str | Sequence[str] | None = None,
        requires: Sequence[str] | None = None,
        streams: Sequence[str] = (),
        device: str | None = None,
        device_policy: str = "require",
        resources: Resources | dict[str, Any] | None = None,
        retries: int = 0,
        timeout_s: float | None = None,
        cache: bool = True,
        map: Mapping[str, str] | None = None,
        max_parallel: int | None = None,
        when: str | None = None,
        unless: str | None = None,
        pool: str | None = None,
        retry_backoff_s: float = 0.0,
        retry_backoff_max_s: float = 300.0,
        retry_on: Any = None,
        escalate_ram: float | None = None,
        **unknown: Any,
    ) -> Any:
        """Declare a node: ``@flow.node`` or ``@flow.node(provides="x", ...)``. Returns the function unchanged.

        ``map={"shard": "shards"}`` calls it once per element of the list ``shards`` (the node then provides
        lists, in element order); ``when="better"`` runs it only when ``better`` is truthy (``unless``:
        falsy), else it is skipped, and so are the nodes that need what it provides (but for parameters
        with a default, which get their default).

        ``pool="licenses"`` holds one slot of that pool (the ``pools`` setting) while each call runs.
        ``retries=3`` runs a failed call again up to 3 times; retry k waits ``retry_backoff_s · 2^(k-1)``
        seconds (±25 %, at most ``retry_backoff_max_s``), holding no machine meanwhile; ``retry_on`` (exception
        classes or names) retries only those failures; ``escalate_ram=2.0`` asks each retry after running out
        of memory for twice the RAM (up to the largest machine).
        """
        # The options are spelt out rather than taken as **options so that IDEs and type checkers know them.
        # NodeOptions is their one list: they are read from the parameters by its field names, and
        # tests/unit/flows/test_node_options.py holds this signature to the same names and defaults.
        given = locals()
        refuse_unknown_options(f"@{self.name}.node", unknown)
        options = NodeOptions(**{option: given[option] for option in NODE_OPTIONS})
        # The names where the node is declared: its annotations may use a class defined in the same function.
        scope = sys._getframe(1).f_locals

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            spec = make_node(func, options, flow_name=self.name, scope=scope)
            spec = with_input_types(spec, {n: i.type for n, i in self.inputs.items()},
                                    f"node {spec.name!r} of flow {self.name!r}")
            if spec.name in self.nodes:
                raise FlowError(f"flow {self.name!r} already has a node named {spec.name!r}; pass name= to rename")
            self.nodes[spec.name] = spec
            self._providers = None
            return func

        return register(fn) if fn is not None else register

    def subflow(
        self,
        child: Flow,
        *,
        name: str | None = None,
        provides: Mapping[str, str] | Sequence[str] | None = None,
        map: Mapping[str, str] | None = None,
        when: str | None = None,
        unless: str | None = None,
        params: Mapping[str, Any] | None = None,
        max_parallel: int | None = None,
    ) -> NodeSpec:
        """Add a node whose every call is a child run of ``child`` (see ``fluksio.flows.subflow``).

        ``provides`` maps child outputs to this flow's messages (a list keeps their names; default: the
        child's declared outputs); ``map`` maps child inputs over list-valued messages (one child run per
        element, each provided message then a list); ``params`` gives constants, or ``Message("name")``
        to fill an input from a message of another name. Other inputs come from messages of the same name.
        """
        if not isinstance(child, Flow):
            raise FlowError(f"flow {self.name!r}: subflow() takes a Flow, got {type(child).__name__}")
        cycle = containing_cycle(self, child)
        if cycle:
            raise FlowError(f"flow {self.name!r} cannot contain itself: {' -> '.join(cycle)}")
        spec = make_subflow(self.name, child, name=name, provides=provides, mapped=map, when=when, unless=unless,
                            params=params, max_parallel=max_parallel)
        if spec.name in self.nodes:
            raise FlowError(f"flow {self.name!r} already has a node named {spec.name!r}; pass name= to rename")
        self.nodes[spec.name] = spec
        self._providers = None
        return spec

    def validate(self) -> Flow:
        """Check the whole graph (raises :class:`FlowError`); cheap after the first call."""
        self.providers  # noqa: B018 - computing it is the check
        return self

    @property
    def providers(self) -> dict[str, str]:
        """Each message's provider: a node name or ``"<input>"``."""
        if self._providers is None:
            known = providers_of(self.inputs, self.nodes, self.name)
            for node_name, spec in list(self.nodes.items()):
                if spec.subflow is not None:
                    spec.subflow.flow.validate()
                    self.nodes[node_name] = resolve_subflow(spec, known)
            self._providers = validate_graph(self.name, self.inputs, self.nodes, self.outputs)
        return self._providers

    def subflows(self) -> list[Flow]:
        """Every flow this one runs as child runs, directly or through its children, each once."""
        found: dict[int, Flow] = {}
        stack = [node.subflow.flow for node in self.nodes.values() if node.subflow is not None]
        while stack:
            flow = stack.pop()
            if id(flow) not in found:
                found[id(flow)] = flow
                stack += [node.subflow.flow for node in flow.nodes.values() if node.subflow is not None]
        return list(found.values())

    def all_nodes(self) -> list[NodeSpec]:
        """Its nodes and those of every flow it runs as child runs: what an installation must be able to run."""
        return [node for flow in (self, *self.subflows()) for node in flow.nodes.values()]

    @property
    def order(self) -> list[str]:
        return topological_order(self.nodes, self.providers)

    @property
    def result_messages(self) -> list[str]:
        """Messages that make up a run's result: the declared outputs, else every node's messages."""
        if self.outputs is not None:
            return list(self.outputs)
        return [m for node in self.nodes.values() for m in node.messages]

    @property
    def version(self) -> str:
        """A digest of the graph's shape (names and ports), independent of the code inside nodes."""
        shape = {
            "inputs": sorted(self.inputs),
            "outputs": self.outputs,
            "nodes": [[n.name, n.requires, n.provides, n.streams, n.map, n.conditions] for n in self.nodes.values()],
        }
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"Flow({self.name!r}, nodes={list(self.nodes)})"
