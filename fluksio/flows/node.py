"""``NodeSpec``: one node's declaration, checked on its own when it is declared."""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fluksio.constants import MAX_NAME_LENGTH
from fluksio.errors import FlowError
from fluksio.schemas import DevicePolicy, Resources

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
    """A Python function as a graph node: what it requires, provides, streams and needs to run."""

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

    @property
    def messages(self) -> tuple[str, ...]:
        """Every message this node makes: its provides and its streams."""
        return self.provides + self.streams


def make_node(
    fn: Callable[..., Any],
    *,
    flow_name: str,
    name: str | None,
    provides: str | Sequence[str] | None,
    requires: Sequence[str] | None,
    streams: Sequence[str],
    device: str | None,
    device_policy: str | DevicePolicy,
    resources: Resources | dict[str, Any] | None,
    retries: int,
    timeout_s: float | None,
    cache: bool,
) -> NodeSpec:
    if not callable(fn):
        raise FlowError(f"@{flow_name}.node must decorate a function, got {type(fn).__name__}")
    node_name = check_identifier("node name", name or getattr(fn, "__name__", None), f"flow {flow_name!r}")
    where = f"node {node_name!r} of flow {flow_name!r}"

    if provides is None:
        provided: tuple[str, ...] = ()
    elif isinstance(provides, str):
        provided = (provides,)
    else:
        provided = tuple(provides)
    for message in provided:
        check_identifier("provided message", message, where)
    stream_names = tuple([streams] if isinstance(streams, str) else streams)
    for message in stream_names:
        check_identifier("streamed message", message, where)
    repeated = sorted({m for m in provided + stream_names if (provided + stream_names).count(m) > 1})
    if repeated:
        raise FlowError(f"{where} declares {', '.join(map(repr, repeated))} more than once")

    parameters, optional = _parameters(fn, where)
    takes_emit = EMIT_PARAMETER in parameters
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
    if stream_names and not takes_emit:
        raise FlowError(f"{where} streams {', '.join(stream_names)} but its function has no "
                        f"'{EMIT_PARAMETER}' parameter")

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
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise FlowError(f"{where}: retries must be a whole number ≥ 0, got {retries!r}")
    if timeout_s is not None and (not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool)
                                  or timeout_s <= 0):
        raise FlowError(f"{where}: timeout_s must be a positive number of seconds, got {timeout_s!r}")

    return NodeSpec(
        name=node_name, fn=fn, requires=required, provides=provided, streams=stream_names, device=device,
        device_policy=policy, resources=res, retries=retries, timeout_s=float(timeout_s) if timeout_s else None,
        cache=bool(cache), takes_emit=takes_emit,
    )


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
        names.append(parameter.name)
        if parameter.default is not parameter.empty:
            optional.add(parameter.name)
    return names, optional
