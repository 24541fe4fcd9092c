"""``NodeSpec``: one node's declaration, checked on its own when it is declared from its ``NodeOptions``."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import keyword
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from fluksio.constants import MAX_NAME_LENGTH
from fluksio.errors import FlowError
from fluksio.flows.annotations import adapter_for, parameter_types
from fluksio.schemas import DevicePolicy, Resources

if TYPE_CHECKING:
    from fluksio.flows.subflow import SubflowCall

#: The parameter through which a node emits streaming values; never a message.
EMIT_PARAMETER = "emit"


def check_identifier(kind: str, value: Any, where: str) -> str:
    if (not isinstance(value, str) or not value.isidentifier() or keyword.iskeyword(value)
            or len(value) > MAX_NAME_LENGTH):
        raise FlowError(f"{kind} {value!r} in {where} is not a valid name; use a Python identifier of at most "
                        f"{MAX_NAME_LENGTH} characters such as 'loss'")
    return value


@dataclass(frozen=True)
class NodeSpec:
    """A Python function as a graph node: what it requires, provides, streams and needs to run.

    ``requires[i]`` is the message bound to parameter ``params[i]``. A mapped node (``map``) is called
    once per element of the product of its mapped messages; each of its messages is then the list of
    its elements' values. ``when``/``unless`` name messages whose truth decides whether it runs at all.

    Its fields are :class:`NodeOptions` checked and resolved; their defaults are what a node declared with
    no options resolves to.
    """

    name: str
    fn: Callable[..., Any] = field(repr=False, compare=False)
    requires: tuple[str, ...]
    provides: tuple[str, ...]
    streams: tuple[str, ...] = ()
    device: str | None = None
    device_policy: DevicePolicy = DevicePolicy.REQUIRE
    resources: Resources = Resources()
    retries: int = 0
    timeout_s: float | None = None
    cache: bool = True
    takes_emit: bool = False
    #: The function's parameter bound to each required message, in the same order.
    params: tuple[str, ...] = ()
    #: Required messages whose parameter has a default: a skipped provider leaves them to the default.
    optional: frozenset[str] = frozenset()
    #: ``(parameter, message)`` of each mapped parameter, in declaration order (the first varies slowest).
    map: tuple[tuple[str, str], ...] = ()
    #: Runs only when this message is truthy / falsy.
    when: str | None = None
    unless: str | None = None
    #: Most elements of a mapped node that run at once (``None``: as many as the machines grant).
    max_parallel: int | None = None
    #: Each annotated parameter's type (a mapped parameter's describes one element), read at declaration.
    types: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: The validator of each annotated parameter.
    adapters: Mapping[str, TypeAdapter[Any]] = field(default_factory=dict, compare=False, repr=False)
    #: Of a subflow node: the flow each call is a child run of (``params`` then names the child's inputs).
    subflow: SubflowCall | None = field(default=None, repr=False, compare=False)
    #: A pool (the ``pools`` setting) each call holds one slot of while it runs.
    pool: str | None = None
    #: Retry ``k`` waits ``retry_backoff_s · 2^(k-1)`` seconds (±25 %), at most ``retry_backoff_max_s``.
    retry_backoff_s: float = 0.0
    retry_backoff_max_s: float = 300.0
    #: Names of the exception classes a failure is retried for (``None``: any); see ``exception_name``.
    retry_on: tuple[str, ...] | None = None
    #: An attempt that ran out of memory is retried asking for ``ram_mb × escalate_ram`` (``None``: the same).
    escalate_ram: float | None = None

    @property
    def messages(self) -> tuple[str, ...]:
        """Every message this node makes: its provides and its streams."""
        return self.provides + self.streams

    @property
    def mapped(self) -> tuple[str, ...]:
        """The messages mapped over, in the order of ``map``."""
        return tuple(message for _param, message in self.map)

    @property
    def conditions(self) -> tuple[str, ...]:
        """The messages ``when`` and ``unless`` name: needed before the node can run, not passed to it."""
        return tuple(m for m in (self.when, self.unless) if m is not None)

    @property
    def needs(self) -> tuple[str, ...]:
        """Every message that must exist (or be skipped) before the node is decided: its inputs and conditions."""
        return self.requires + tuple(m for m in self.conditions if m not in self.requires)


@dataclass(frozen=True)
class NodeOptions:
    """Every option ``@flow.node(...)`` takes, with its default, as given: :func:`make_node` checks and
    resolves them into the :class:`NodeSpec` fields of the same names (whose comments say what each means).

    The one list of a node's options: :data:`NODE_OPTIONS` is read from its fields, and a test holds
    ``Flow.node``'s keyword parameters to the same names and defaults.
    """

    #: The node's name (``None``: the function's).
    name: str | None = None
    #: One message name or several (``None``: none).
    provides: str | Sequence[str] | None = None
    #: The message bound to each parameter, in order (``None``: each parameter's own name).
    requires: Sequence[str] | None = None
    streams: Sequence[str] = ()
    device: str | None = None
    device_policy: str | DevicePolicy = "require"
    resources: Resources | dict[str, Any] | None = None
    retries: int = 0
    timeout_s: float | None = None
    cache: bool = True
    #: Parameter → the list-valued message it takes one element of.
    map: Mapping[str, str] | None = None
    max_parallel: int | None = None
    when: str | None = None
    unless: str | None = None
    pool: str | None = None
    retry_backoff_s: float = 0.0
    retry_backoff_max_s: float = 300.0
    #: An exception class or its name, or a tuple of them (``None``: any failure).
    retry_on: Any = None
    escalate_ram: float | None = None


#: What ``@flow.node(...)`` accepts, for the message that names a misspelt option.
NODE_OPTIONS = tuple(option.name for option in dataclasses.fields(NodeOptions))


def exception_name(error: type[BaseException]) -> str:
    """How a ``retry_on`` class is matched across processes: by its qualified name within its module
    (``TimeoutError``, ``Client.Refused``), which a failure's ``error_types`` end with."""
    return error.__qualname__


def error_types(error: BaseException) -> tuple[str, ...]:
    """The names of an exception's class and its bases, most specific first: ``TimeoutError`` for builtins,
    ``module.Qualname`` for the rest (``object`` left out). What a failed call reports, for ``retry_on``."""
    return tuple(cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
                 for cls in type(error).__mro__ if cls is not object)


def refuse_unknown_options(where: str, unknown: Mapping[str, Any], known: Sequence[str] = NODE_OPTIONS) -> None:
    """A misspelt option is an error that names the options there are (and the likely one)."""
    if not unknown:
        return
    parts = []
    for option in sorted(unknown):
        # Two guesses: 'retry' is as likely retries as retry_on.
        close = difflib.get_close_matches(option, known, n=2)
        parts.append(f"{option!r}" + (f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""))
    raise FlowError(f"{where} got unknown option(s) {', '.join(parts)}; the options are: {', '.join(known)}")


def make_node(fn: Callable[..., Any], options: NodeOptions, *, flow_name: str,
              scope: Mapping[str, Any] | None = None) -> NodeSpec:
    """The node ``fn`` declares with ``options``; ``scope``: the names visible where it was declared (for its
    annotations)."""
    if not callable(fn):
        raise FlowError(f"@{flow_name}.node must decorate a function, got {type(fn).__name__}")
    node_name = check_identifier("node name", options.name or getattr(fn, "__name__", None), f"flow {flow_name!r}")
    where = f"node {node_name!r} of flow {flow_name!r}"
    provided, stream_names = _ports(options.provides, options.streams, where)
    binding = _binding(fn, options.requires, options.map, where)
    if stream_names and not binding.takes_emit:
        raise FlowError(f"{where} streams {', '.join(stream_names)} but its function has no "
                        f"'{EMIT_PARAMETER}' parameter")
    conditions = {kind: check_identifier(f"{kind} message", value, where)
                  for kind, value in (("when", options.when), ("unless", options.unless)) if value is not None}
    policy, res = _placement(options.device, options.device_policy, options.resources, where)
    _check_limits(where, options, mapped=bool(binding.mapping))
    types = parameter_types(fn, binding.params, where, scope)
    adapters = {param: adapter_for(annotation, f"{where}, parameter {param!r}") for param, annotation in types.items()}
    return NodeSpec(
        name=node_name, fn=fn, requires=binding.requires, provides=provided, streams=stream_names,
        device=options.device, device_policy=policy, resources=res, retries=options.retries,
        timeout_s=float(options.timeout_s) if options.timeout_s else None, cache=bool(options.cache),
        takes_emit=binding.takes_emit, params=binding.params, optional=binding.optional,
        map=tuple(binding.mapping.items()), when=conditions.get("when"), unless=conditions.get("unless"),
        max_parallel=options.max_parallel, types=types, adapters=adapters, pool=options.pool,
        **_retry_fields(options, res, where),
    )


def _ports(provides: str | Sequence[str] | None, streams: Sequence[str], where: str
           ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The messages the node provides and those it streams, each a valid name, none declared twice."""
    provided: tuple[str, ...] = (() if provides is None else (provides,) if isinstance(provides, str)
                                 else tuple(provides))
    for message in provided:
        check_identifier("provided message", message, where)
    stream_names = tuple([streams] if isinstance(streams, str) else streams)
    for message in stream_names:
        check_identifier("streamed message", message, where)
    repeated = sorted({m for m in provided + stream_names if (provided + stream_names).count(m) > 1})
    if repeated:
        raise FlowError(f"{where} declares {', '.join(map(repr, repeated))} more than once")
    return provided, stream_names


@dataclass(frozen=True)
class _Binding:
    """How the function's parameters are bound to messages (see :class:`NodeSpec`)."""

    params: tuple[str, ...]
    requires: tuple[str, ...]
    optional: frozenset[str]
    mapping: dict[str, str]
    takes_emit: bool


def _binding(fn: Callable[..., Any], requires: Sequence[str] | None, mapped: Mapping[str, str] | None,
             where: str) -> _Binding:
    """The parameters bound to messages: by name, or to ``requires`` in order; ``map`` puts a list's element in."""
    parameters, optional = _parameters(fn, where)
    positional = [p for p in parameters if p != EMIT_PARAMETER]
    mandatory = [p for p in positional if p not in optional]
    if requires is None:
        required = tuple(positional)
    else:
        required = tuple([requires] if isinstance(requires, str) else requires)
        for message in required:
            check_identifier("required message", message, where)
        if not len(mandatory) <= len(required) <= len(positional):
            raise FlowError(
                f"{where} requires {len(required)} message(s) ({', '.join(required) or 'none'}) but its function "
                f"takes {len(positional)} parameter(s) ({', '.join(positional) or 'none'}), {len(mandatory)} of them "
                "without a default; give one message per parameter, in order"
            )
    bound = tuple(positional[:len(required)])
    mapping = _mapping(mapped, bound, where)
    required = tuple(mapping.get(param, message) for param, message in zip(bound, required))
    mapped_too = sorted({m for m in required if m in mapping.values() and required.count(m) > 1})
    if mapped_too:
        raise FlowError(f"{where} maps over {mapped_too[0]!r} and also takes it whole under the same name; a "
                        "message is either mapped over or passed whole: rename the parameter that takes it whole, "
                        "or drop it from map=")
    defaulted = frozenset(m for p, m in zip(bound, required) if p in optional and p not in mapping)
    return _Binding(bound, required, defaulted, mapping, EMIT_PARAMETER in parameters)


def _placement(device: str | None, device_policy: str | DevicePolicy, resources: Resources | dict[str, Any] | None,
               where: str) -> tuple[DevicePolicy, Resources]:
    """The device policy and resources, checked (a call needs at least one cpu: its worker's slot)."""
    try:
        policy = DevicePolicy(device_policy)
    except ValueError:
        raise FlowError(f"{where}: device_policy must be 'require' or 'prefer', got {device_policy!r}") from None
    if device is not None:
        check_identifier("device label", device, where)
    try:
        res = resources if isinstance(resources, Resources) else Resources(**(resources or {}))
    except (ValidationError, TypeError) as exc:
        raise FlowError(f"{where}: invalid resources: {exc}") from None
    if res.cpus < 1:
        # Every call occupies one slot of its worker's pool, and slots are counted in cpus.
        raise FlowError(f"{where}: resources must ask for at least 1 cpu, got {res.cpus}")
    return policy, res


def _check_limits(where: str, options: NodeOptions, *, mapped: bool) -> None:
    max_parallel, retries, timeout_s = options.max_parallel, options.retries, options.timeout_s
    if max_parallel is not None:
        if not mapped:
            raise FlowError(f"{where}: max_parallel caps how many elements of a mapped node run at once; the node "
                            "has no map=")
        if not isinstance(max_parallel, int) or isinstance(max_parallel, bool) or max_parallel < 1:
            raise FlowError(f"{where}: max_parallel must be a whole number ≥ 1, got {max_parallel!r}")
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise FlowError(f"{where}: retries must be a whole number ≥ 0, got {retries!r}")
    if options.pool is not None:
        check_identifier("pool", options.pool, where)
    if timeout_s is not None and (not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool)
                                  or not 0 < timeout_s < math.inf):  # NaN compares false both ways
        raise FlowError(f"{where}: timeout_s must be a positive number of seconds, got {timeout_s!r}")


def with_input_types(spec: NodeSpec, input_types: Mapping[str, Any], where: str) -> NodeSpec:
    """``spec`` whose unannotated parameters bound to a flow input receive it as the input's declared type
    (a mapped one: the type of the declared list's elements). The flow's declaration is the annotation."""
    types, adapters = dict(spec.types), dict(spec.adapters)
    mapped = dict(spec.map)
    for param, message in zip(spec.params, spec.requires):
        if param in types or message not in input_types:
            continue
        declared = input_types[message]
        if param in mapped:  # the element of a list[X] (or tuple[X, ...]) input is an X
            arguments = typing.get_args(declared)
            if typing.get_origin(declared) not in (list, tuple) or not arguments:
                continue
            declared = arguments[0]
        if declared in (Any, object):
            continue
        types[param] = declared
        adapters[param] = adapter_for(declared, f"{where}, parameter {param!r}")
    if len(types) == len(spec.types):
        return spec
    return dataclasses.replace(spec, types=types, adapters=adapters)


def _seconds(value: Any, what: str, where: str, positive: bool = False) -> float:
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < math.inf
            or (positive and not value)):
        raise FlowError(f"{where}: {what} must be a {'positive' if positive else 'non-negative'} number of seconds, "
                        f"got {value!r}")
    return float(value)


def _retry_fields(options: NodeOptions, resources: Resources, where: str) -> dict[str, Any]:
    """``retry_backoff_s``, ``retry_backoff_max_s``, ``retry_on`` and ``escalate_ram`` checked, as NodeSpec fields.

    Each of them shapes retries, so each needs ``retries`` ≥ 1; ``retry_on`` takes exception classes or their
    names (one, or a tuple); ``escalate_ram`` multiplies a ``ram_mb`` the node asks for, by more than 1.
    """
    defaults = NodeOptions()
    given = [name for name in ("retry_backoff_s", "retry_on", "escalate_ram")
             if getattr(options, name) != getattr(defaults, name)]
    if given and not options.retries:
        verb = "applies" if len(given) == 1 else "apply"
        raise FlowError(f"{where}: {' and '.join(given)} {verb} to retries, but the node has retries=0; add retries=N")
    backoff = _seconds(options.retry_backoff_s, "retry_backoff_s", where)
    cap = _seconds(options.retry_backoff_max_s, "retry_backoff_max_s", where, positive=True)
    if cap < backoff:
        raise FlowError(f"{where}: retry_backoff_max_s ({cap:g}) is less than retry_backoff_s ({backoff:g}); the "
                        "cap must be at least the first wait")
    names: tuple[str, ...] | None = None
    if options.retry_on is not None:
        given_on = options.retry_on if isinstance(options.retry_on, (tuple, list, set, frozenset)) else (
            options.retry_on,)
        names = tuple(_exception(entry, where) for entry in given_on)
        if not names:
            raise FlowError(f"{where}: retry_on is empty, so no failure would be retried; name exception classes "
                            "(retry_on=(TimeoutError, 'ConnectionError')) or leave it out to retry any failure")
    escalate = options.escalate_ram
    if escalate is not None:
        if not isinstance(escalate, (int, float)) or isinstance(escalate, bool) or not 1 < escalate < math.inf:
            raise FlowError(f"{where}: escalate_ram must be a number greater than 1 (2.0 doubles the RAM of each "
                            f"retry after running out of memory), got {escalate!r}")
        if not resources.ram_mb:
            raise FlowError(f"{where}: escalate_ram multiplies the RAM the node asks for, and it asks for none; "
                            "give resources=Resources(ram_mb=...)")
        escalate = float(escalate)
    return {"retry_backoff_s": backoff, "retry_backoff_max_s": cap, "retry_on": names, "escalate_ram": escalate}


def _exception(entry: Any, where: str) -> str:
    """A ``retry_on`` entry as the name failures are matched by."""
    if isinstance(entry, type) and issubclass(entry, BaseException):
        return exception_name(entry)
    if isinstance(entry, str) and entry and all(part.isidentifier() for part in entry.split(".")):
        return entry
    raise FlowError(f"{where}: retry_on takes exception classes or their names (TimeoutError, 'ConnectionError', "
                    f"'requests.exceptions.HTTPError'), got {entry!r}")


def _mapping(mapped: Mapping[str, str] | None, params: tuple[str, ...], where: str) -> dict[str, str]:
    """``map=`` checked: each key one of the parameters bound to messages, each value a message name."""
    if mapped is None:
        return {}
    if not isinstance(mapped, Mapping) or not mapped:
        raise FlowError(f"{where}: map must be a non-empty dict of parameter to the list-valued message it maps "
                        f"over, e.g. map={{'shard': 'shards'}}; got {mapped!r}")
    for param, message in mapped.items():
        if param not in params:
            raise FlowError(f"{where}: map key {param!r} is not a parameter of the node (its parameters: "
                            f"{', '.join(params) or 'none'})")
        check_identifier("mapped message", message, where)
    return dict(mapped)


def _parameters(fn: Callable[..., Any], where: str) -> tuple[list[str], set[str]]:
    """The function's parameter names, and those of them that have a default."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        raise FlowError(f"{where}: cannot read the function's signature") from None
    names, optional = [], set()
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise FlowError(f"{where}: *args/**kwargs cannot be bound to messages; name each parameter")
        if parameter.kind is parameter.KEYWORD_ONLY and parameter.name != EMIT_PARAMETER:
            raise FlowError(f"{where}: keyword-only parameter {parameter.name!r} cannot be bound; make it positional")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            # Arguments are passed by name, so that a skipped message can leave its parameter to its default.
            raise FlowError(f"{where}: positional-only parameter {parameter.name!r} cannot be bound by name; "
                            "remove the '/' from the signature")
        names.append(parameter.name)
        if parameter.default is not parameter.empty:
            optional.add(parameter.name)
    return names, optional
