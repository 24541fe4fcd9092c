"""A flow described as JSON, and rebuilt from it: what a driver walks for a run whose code it never imports.

A run ships its code as a package (runs/code.py) and its graph as this description. Everything the driver
reads is data: nodes, messages, maps, conditions, subflows (described once each, by name) and options. A
rebuilt node's ``fn`` only says where its code is; its workers run the package.

The format is the pydantic models below, read strictly (missing, unknown and mistyped keys are refused).
Every node is rebuilt through the same checks as a declared one (``make_node``, ``make_subflow``), every
flow is validated, and each node must describe back to exactly what was read, so a manifest that no
declaration could have produced is a :class:`ManifestError`, never a graph that is walked wrongly.

Inputs keep their type as a kind: ``secret`` (rebuilt as :class:`Secret`), ``artifact``, ``class`` (a type
with no JSON form, such as a codec's ``numpy.ndarray``) or ``json`` (with its JSON schema, for display).
The artifact and codec types live in packages above this one, so they are found by their recorded
``module:qualname`` in the ``known_types`` the caller passes; any other input is rebuilt as a type that
takes any value (its values were checked against the real type when the run was submitted) and keeps
its description, so a rebuilt flow describes to the same bytes. Pure: no imports of users' code.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import re
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, JsonValue, SerializerFunctionWrapHandler, ValidationError, model_serializer
from pydantic_core import core_schema, to_jsonable_python

from fluksio.errors import FlowError
from fluksio.flows.annotations import type_name
from fluksio.flows.flow import Flow, InputSpec, check_include
from fluksio.flows.node import EMIT_PARAMETER, NODE_OPTIONS, NodeOptions, NodeSpec, make_node
from fluksio.flows.node_code import NODE_CODE, node_codes
from fluksio.flows.package import FLOWFILE_MODULE_PREFIX
from fluksio.flows.secret import Secret
from fluksio.flows.subflow import Message, SubflowCall, make_subflow
from fluksio.schemas import Resources

#: The version of the format :func:`describe` writes and :func:`rebuild` reads.
MANIFEST_FORMAT = 1
#: How the artifact type is recorded (artifacts/ is not below flows/, so it is known here by name only).
ARTIFACT_CLASS = "fluksio.artifacts.artifact:Artifact"
#: The attribute of a rebuilt node's ``fn`` holding its parameters' type names (its ``types`` are empty).
TYPE_NAMES = "__fluksio_type_names__"
#: A flow file imported by path is a module named after its absolute path (flows/registry.py): shown by its
#: file's name, so that the same flow describes to the same bytes wherever its folder is.
_FLOW_FILE_MODULE = re.compile(rf"\b{FLOWFILE_MODULE_PREFIX}(\w+?)_[0-9a-f]{{12}}\b")
#: Validation errors named in a ManifestError, at most.
_ERRORS_SHOWN = 2


class ManifestError(FlowError):
    """A flow's description cannot be written, or read back into a flow."""


# -- the format -------------------------------------------------------------------------------------------


class _Entry(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class InputEntry(_Entry):
    """A flow input: ``default`` is absent when the input is required."""

    name: str
    #: The type as messages show it (``list[int]``, ``numpy.ndarray``).
    type: str
    kind: Literal["secret", "artifact", "class", "json"]
    #: ``module:qualname`` when the type is a plain class (``None``: a generic such as ``list[int]``).
    class_name: str | None
    #: The type's JSON schema, for display (``None``: it has none).
    json_schema: dict[str, JsonValue] | None
    default: JsonValue = None

    @model_serializer(mode="wrap")
    def _without_absent_default(self, write: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A required input has no ``default`` key (``null`` is a default like any other)."""
        written: dict[str, Any] = write(self)
        if "default" not in self.model_fields_set:
            written.pop("default", None)
        return written


class SubflowEntry(_Entry):
    flow: str
    outputs: tuple[tuple[str, str], ...]
    constants: tuple[tuple[str, JsonValue], ...]


class NodeEntry(_Entry):
    """Every :class:`NodeSpec` field a driver reads, as JSON; ``types`` names the annotated parameters' types."""

    name: str
    requires: tuple[str, ...]
    provides: tuple[str, ...]
    streams: tuple[str, ...]
    device: str | None
    device_policy: str
    resources: Resources
    retries: int
    timeout_s: float | None
    cache: bool
    takes_emit: bool
    params: tuple[str, ...]
    optional: tuple[str, ...]
    map: tuple[tuple[str, str], ...]
    when: str | None
    unless: str | None
    max_parallel: int | None
    pool: str | None
    retry_backoff_s: float
    retry_backoff_max_s: float
    retry_on: tuple[str, ...] | None
    escalate_ram: float | None
    types: dict[str, str]
    subflow: SubflowEntry | None
    #: The node's code identity, which keys its calls in the run cache (flows/node_code.py), worked out where
    #: the flow was submitted: a driver that never imports the code keys on it. ``None``: the flow's whole code.
    code: str | None = None


class FlowEntry(_Entry):
    inputs: tuple[InputEntry, ...]
    outputs: tuple[str, ...] | None
    include: tuple[str, ...]
    nodes: tuple[NodeEntry, ...]


class Manifest(_Entry):
    format: int
    #: The flow the manifest is of; ``flows`` holds it and every flow it runs as a subflow, by name.
    flow: str
    flows: dict[str, FlowEntry]


# -- describing -------------------------------------------------------------------------------------------


def describe(flow: Flow) -> dict[str, Any]:
    """``flow`` (validated first) and the flows it runs as subflows, each once by name, as JSON values."""
    flow.validate()
    entries: dict[str, FlowEntry] = {}
    for each in (flow, *flow.subflows()):
        entry = _flow_entry(each)
        if entries.setdefault(each.name, entry) != entry:
            raise ManifestError(f"flow {flow.name!r} runs two different flows named {each.name!r}; a manifest "
                                "names each flow once: rename one of them")
    manifest = Manifest(format=MANIFEST_FORMAT, flow=flow.name, flows=entries)
    return manifest.model_dump(mode="json")


def manifest_bytes(flow: Flow) -> bytes:
    """:func:`describe` as canonical JSON: the same flow gives the same bytes in any process."""
    return json.dumps(describe(flow), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def class_name(cls: type) -> str:
    """How a manifest names a class: ``module:qualname`` (``known_types`` of :func:`rebuild` uses it)."""
    return _shown(f"{cls.__module__}:{cls.__qualname__}")


def _shown(name: str) -> str:
    return _FLOW_FILE_MODULE.sub(r"\1", name)


def _flow_entry(flow: Flow) -> FlowEntry:
    codes = node_codes(flow)
    return FlowEntry(inputs=tuple(_input_entry(flow, spec) for spec in flow.inputs.values()),
                     outputs=tuple(flow.outputs) if flow.outputs is not None else None, include=flow.include,
                     nodes=tuple(_node_entry(flow, spec, codes.get(spec.name)) for spec in flow.nodes.values()))


def _input_entry(flow: Flow, spec: InputSpec) -> InputEntry:
    where = f"input {spec.name!r} of flow {flow.name!r}"
    described: dict[str, Any] = {"name": spec.name}
    if isinstance(spec.type, type) and issubclass(spec.type, DescribedType):
        described |= spec.type.description  # rebuilt here: described as it was
    else:
        described |= _type_entry(spec)
    if not spec.required:
        described["default"] = _json(spec.default, f"the default of {where}")
    return InputEntry.model_validate(described)


def _type_entry(spec: InputSpec) -> dict[str, Any]:
    declared = spec.type
    cls = class_name(declared) if isinstance(declared, type) else None
    schema = None
    if declared is Secret:
        kind = "secret"
    elif cls == ARTIFACT_CLASS:
        kind = "artifact"
    else:
        try:
            with warnings.catch_warnings():  # a default pydantic cannot show is left out of the schema, silently
                warnings.simplefilter("ignore")
                schema = spec.adapter().json_schema()
        except Exception:  # pydantic raises several kinds for a type with no JSON form
            schema = None
        kind = "json" if schema is not None else "class"
    return {"type": _shown(type_name(declared)), "kind": kind, "class_name": cls, "json_schema": schema}


def _node_entry(flow: Flow, spec: NodeSpec, code: str | None) -> NodeEntry:
    where = f"node {spec.name!r} of flow {flow.name!r}"
    call = spec.subflow
    subflow = None if call is None else SubflowEntry(
        flow=call.flow.name, outputs=call.outputs,
        constants=tuple((name, _json(value, f"the constant {name!r} of {where}")) for name, value in call.constants))
    names = getattr(spec.fn, TYPE_NAMES, None)
    types = dict(names) if names is not None else {p: _shown(type_name(t)) for p, t in spec.types.items()}
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name in NodeEntry.model_fields}
    return NodeEntry.model_validate(fields | {
        "device_policy": spec.device_policy.value,
        "optional": tuple(sorted(spec.optional)), "types": types, "subflow": subflow, "code": code})


def _json(value: Any, what: str) -> JsonValue:
    try:
        jsonable = to_jsonable_python(value)
        json.dumps(jsonable, allow_nan=False)
    except (ValueError, TypeError) as exc:  # pydantic's serialisation errors are ValueErrors too
        raise ManifestError(f"{what} ({value!r}) cannot be described as JSON ({exc}); give a JSON value "
                            "(NaN and infinities are not)") from None
    return typing.cast(JsonValue, jsonable)


# -- rebuilding -------------------------------------------------------------------------------------------


class DescribedType:
    """The type of an input rebuilt from its description: takes any value, and describes as it was described.

    The run's parameters were checked against the real type when it was submitted; a child run the driver
    starts is given values its parent's nodes made.
    """

    #: The input's type entry (type, kind, class_name, json_schema).
    description: ClassVar[dict[str, Any]] = {}

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.any_schema()


@functools.cache
def _described_type(entry: str) -> type[DescribedType]:
    """One class per distinct description (by its canonical JSON): validators and codec lookups cache by type."""
    description = json.loads(entry)
    made = type(description["type"], (DescribedType,), {"description": description, "__module__": __name__})
    return typing.cast(type[DescribedType], made)


def rebuild(data: Any, *, code_digest: str | None, known_types: Mapping[str, type] | None = None) -> Flow:
    """The flow ``data`` (:func:`describe`'s value, or its JSON as bytes) describes, whose code is the package
    ``code_digest``. ``known_types``: classes by :func:`class_name`, for inputs of types this package cannot
    import (``Artifact``, codecs' types); other inputs take any value (see the module's docstring).

    Raises :class:`ManifestError` saying what is wrong with a manifest that is not one.
    """
    manifest = _read(data)
    builder = _Builder(manifest, code_digest, known_types or {})
    try:
        flow = builder.flow(manifest.flow, ())
    except FlowError as exc:  # the checks every declaration passes, and those of the manifest's own
        raise ManifestError(f"manifest of flow {manifest.flow!r}: {' '.join(str(exc).split())}") from None
    unused = sorted(set(manifest.flows) - set(builder.built))
    if unused:
        raise ManifestError(f"manifest of flow {manifest.flow!r} describes {', '.join(map(repr, unused))}, which it "
                            f"never runs; a manifest describes the flow and the flows it runs as subflows, no more")
    return flow


def _read(data: Any) -> Manifest:
    if isinstance(data, (bytes, bytearray, str)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise ManifestError(f"a manifest is JSON, and this is not: {exc}") from None
    if not isinstance(data, Mapping):
        raise ManifestError(f"a manifest is a JSON object, got {type(data).__name__}")
    if data.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"manifest format {data.get('format')!r} is not one this fluksio reads (it reads "
                            f"format {MANIFEST_FORMAT}); describe the flow with this version of fluksio")
    try:
        # As text: strictly JSON's types (a tuple is no array here), and no NaN.
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"a manifest holds JSON values only: {exc}") from None
    try:
        return Manifest.model_validate_json(text, strict=True)  # strict all through: Resources' fields too
    except ValidationError as exc:
        raise ManifestError(_problems(data, exc)) from None


def _problems(data: Any, exc: ValidationError) -> str:
    """What pydantic found, in one line, each error located by flow, node and key."""
    flow = data.get("flow") if isinstance(data, dict) else None
    parts = []
    errors = exc.errors(include_url=False)
    for error in errors[:_ERRORS_SHOWN]:
        where, key = _located(data, error["loc"])
        if error["type"] == "missing":
            parts.append(f"{where}missing key {key!r}")
        elif error["type"] == "extra_forbidden":
            parts.append(f"{where}unknown key {key!r}")
        else:
            got = json.dumps(error.get("input"), default=repr)
            parts.append(f"{where}{key}: {error['msg']} (got {got if len(got) <= 60 else got[:59] + '…'})")
    if len(errors) > _ERRORS_SHOWN:
        parts.append(f"and {len(errors) - _ERRORS_SHOWN} more")
    return f"manifest{f' of flow {flow!r}' if isinstance(flow, str) else ''}: {'; '.join(parts)}"


def _located(data: Any, loc: tuple[int | str, ...]) -> tuple[str, str]:
    """``("flow 'f', node 'fit': ", "retries")`` for ``("flows", "f", "nodes", 0, "retries")``."""
    places: list[str] = []
    keys: list[str] = []
    here: Any = data
    parent: int | str | None = None
    for part in loc[:-1]:
        here = here.get(part) if isinstance(here, dict) else (
            here[part] if isinstance(here, list) and isinstance(part, int) and part < len(here) else None)
        named = here.get("name") if isinstance(here, dict) else None
        if parent == "flows":
            places.append(f"flow {part!r}")
        elif parent in ("nodes", "inputs") and isinstance(part, int):
            kind = "node" if parent == "nodes" else "input"
            places.append(f"{kind} {named!r}" if isinstance(named, str) else f"{parent}[{part}]")
        elif part not in ("flows", "nodes", "inputs"):
            keys.append(str(part))
        parent = part
    key = ".".join([*keys, str(loc[-1])]) if loc else "the manifest"
    return (", ".join(places) + ": " if places else ""), key


class _Builder:
    """Rebuilds the manifest's flows, each once by name (a subflow run twice is one flow, as it was)."""

    def __init__(self, manifest: Manifest, code_digest: str | None, known_types: Mapping[str, type]) -> None:
        self.manifest = manifest
        self.code_digest = code_digest
        self.known_types = known_types
        self.built: dict[str, Flow] = {}

    def flow(self, name: str, running: tuple[str, ...]) -> Flow:
        if name in self.built:
            return self.built[name]
        if name in running:
            raise FlowError(f"flow {name!r} contains itself: {' -> '.join([*running, name])}")
        entry = self.manifest.flows.get(name)
        if entry is None:
            whose = f"flow {running[-1]!r} runs flow {name!r} as a subflow" if running else f"it is of flow {name!r}"
            raise FlowError(f"{whose}, but the manifest describes no flow of that name (it describes: "
                            f"{', '.join(sorted(self.manifest.flows)) or 'none'})")
        names = [i.name for i in entry.inputs]
        if len(set(names)) != len(names):
            raise FlowError(f"flow {name!r} declares an input twice")
        flow = Flow.described(name, {i.name: self._input(i) for i in entry.inputs}, entry.outputs,
                              code_digest=self.code_digest)
        flow.include = check_include(name, entry.include)
        for node in entry.nodes:
            if node.name in flow.nodes:
                raise FlowError(f"flow {name!r} has two nodes named {node.name!r}")
            flow.nodes[node.name] = self._node(flow, node, (*running, name))
        flow.validate()
        codes = node_codes(flow)
        for node in entry.nodes:  # validated, so subflow nodes are resolved as the described ones were
            _check_same(flow, node, _node_entry(flow, flow.nodes[node.name], codes.get(node.name)))
        self.built[name] = flow
        return flow

    def _input(self, entry: InputEntry) -> Any:
        if entry.kind == "secret":
            declared: Any = Secret
        elif entry.class_name is not None and entry.class_name in self.known_types:
            declared = self.known_types[entry.class_name]
        else:
            description = entry.model_dump(mode="json", include={"type", "kind", "class_name", "json_schema"})
            declared = _described_type(json.dumps(description, sort_keys=True))
        return (declared, entry.default) if "default" in entry.model_fields_set else declared

    def _node(self, flow: Flow, node: NodeEntry, running: tuple[str, ...]) -> NodeSpec:
        fn = _code_elsewhere(flow.name, node, self.code_digest)
        if node.subflow is None:
            setattr(fn, "__signature__", _signature(flow.name, node))
            options = NodeOptions(**(node.model_dump(include=set(NODE_OPTIONS)) | {"map": dict(node.map) or None}))
            return make_node(fn, options, flow_name=flow.name)
        child = self.flow(node.subflow.flow, running)
        mapped = dict(node.map)
        params: dict[str, Any] = dict(node.subflow.constants)
        # Message("lr") for input lr is not the same as nothing: a renamed input is never optional.
        params |= {param: Message(message) for param, message in zip(node.params, node.requires)
                   if param not in mapped and (message != param or message not in node.optional)}
        provides = {output: message for message, output in node.subflow.outputs}
        spec = make_subflow(flow.name, child, name=node.name, provides=provides, mapped=mapped or None,
                            when=node.when, unless=node.unless, params=params, max_parallel=node.max_parallel)
        assert spec.subflow is not None
        # Constants are kept as the JSON they travelled as: the child run is given them as they are.
        return dataclasses.replace(spec, fn=fn, subflow=SubflowCall(child, spec.subflow.outputs,
                                                                    spec.subflow.constants))


def _code_elsewhere(flow: str, node: NodeEntry, code_digest: str | None) -> Callable[..., NoReturn]:
    """A rebuilt node's ``fn``: a call that says where the code is, carrying its parameters' type names."""
    unknown = sorted(set(node.types) - set(node.params))
    if unknown:
        raise FlowError(f"node {node.name!r} of flow {flow!r}: types names {', '.join(map(repr, unknown))}, "
                        f"which are not among its params ({', '.join(node.params) or 'none'})")
    place = f"package {code_digest}" if code_digest else "a package this process was not told of"
    message = (f"node {node.name!r} of flow {flow!r} was rebuilt from its description and cannot be called here; "
               f"its code is in {place}")

    def rebuilt(*args: Any, **kwargs: Any) -> NoReturn:
        raise FlowError(message)

    rebuilt.__name__ = rebuilt.__qualname__ = node.name
    rebuilt.__annotations__ = {}
    setattr(rebuilt, TYPE_NAMES, dict(node.types))
    setattr(rebuilt, NODE_CODE, node.code)
    return rebuilt


def _signature(flow: str, node: NodeEntry) -> inspect.Signature:
    """The signature a plain node's description binds: ``make_node`` reads the node's binding from it."""
    mapped = dict(node.map)
    parameters, defaulted = [], False
    try:
        for param, required in zip(node.params, node.requires):
            # Only an unmapped parameter's default shows in a NodeSpec (as ``optional``); a mapped one takes one
            # when a parameter before it has one, as a signature must.
            defaulted = (required in node.optional) if param not in mapped else defaulted
            parameters.append(inspect.Parameter(param, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                default=None if defaulted else inspect.Parameter.empty))
        if node.takes_emit:
            parameters.append(inspect.Parameter(EMIT_PARAMETER, inspect.Parameter.KEYWORD_ONLY, default=None))
        return inspect.Signature(parameters)
    except ValueError as exc:
        raise FlowError(f"node {node.name!r} of flow {flow!r}: its params {list(node.params)} cannot be a "
                        f"function's parameters ({exc})") from None


def _check_same(flow: Flow, read: NodeEntry, rebuilt: NodeEntry) -> None:
    """Refuse a node whose fields disagree with what its declaration makes of them."""
    given, made = read.model_dump(mode="json"), rebuilt.model_dump(mode="json")
    for key in NodeEntry.model_fields:
        if given[key] != made[key]:
            raise FlowError(f"node {read.name!r} of flow {flow.name!r}: its {key} is {given[key]!r}, but a node "
                            f"declared with its other fields has {made[key]!r}; the manifest was not written by "
                            "describe(), or was changed since")
