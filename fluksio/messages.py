"""What a driver and the workers tell each other: a node call, its completion, and the driver's wake-ups.

Each message is a frozen dataclass, and its fields are its wire schema, written once: on the wire it is a
JSON object (a Celery task's argument, a Redis list entry) whose keys are the fields (and ``kind`` first, for
an inbox message), derived by :func:`wire_message` when the class is defined. A message from the broker with
a field missing, a field nobody knows, or a field of the wrong type is refused with
:class:`~fluksio.errors.MessageRefused`, never read half-way.

Within one process (the embedded default) the objects travel as they are:
nothing is encoded for an in-process queue.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, Literal, Self, TypeVar, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel

from fluksio.errors import MessageRefused
from fluksio.schemas import Grant, unit_of

#: The ``kind`` of each inbox message on the wire.
DONE, WAKE, CANCEL, CHILD = "done", "wake", "cancel", "child"


def call_id(run_id: str, epoch: int, unit: str, attempt: int) -> str:
    """The id of one node call (the Celery task's id, what Flower names it by, the grant's id):
    ``<run>[.r<epoch>].<unit>.<attempt>``. A resumed run's calls are named apart from those of the drive
    that went before it; ``unit`` is a node, or ``node[i]`` for element i of a mapped node."""
    drive = f".r{epoch}" if epoch else ""
    return f"{run_id}{drive}.{unit}.{attempt}"


#: A call id taken apart (made by :func:`call_id`): ``<run id>[.r<epoch>].<unit>.<attempt>``.
_CALL_ID = re.compile(r"^(?P<run>[0-9A-Z]{26})(?:\.r(?P<epoch>\d+))?\.(?P<node>[^.]+)\.(?P<attempt>\d+)$")


@dataclass(frozen=True)
class CallRef:
    """A call id taken apart: whose run, which drive of it (its epoch), which unit, which attempt."""

    run_id: str
    epoch: int
    node: str
    attempt: int


def parse_call_id(text: str) -> CallRef | None:
    """The parts of a call id, ``None`` for an id of another shape (a grant not made by a driver)."""
    match = _CALL_ID.match(text)
    if match is None:
        return None
    return CallRef(match["run"], int(match["epoch"] or 0), match["node"], int(match["attempt"]))


class _Codec:
    """How the values of one annotation travel: the JSON types they may arrive as, and the conversions to and
    from them (``None``: the value travels as it is). ``load`` raises ValueError saying what is wrong, as a
    phrase that follows the field's name ("must be int, got bool")."""

    __slots__ = ("json_types", "expected", "dump", "load")

    def __init__(self, json_types: tuple[type, ...], expected: str, dump: Callable[[Any], Any] | None = None,
                 load: Callable[[Any], Any] | None = None) -> None:
        self.json_types, self.expected, self.dump, self.load = json_types, expected, dump, load

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is of one of the JSON types. A bool is an int to Python, never to a message: an
        attempt of ``true`` is refused."""
        kind = type(value)
        return kind in self.json_types or (kind is not bool and isinstance(value, self.json_types))


def _codec_of(hint: Any) -> _Codec:
    """The codec of a field annotated ``hint``; TypeError, when the class is defined, for one no JSON carries."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType) and type(None) in args and len(args) == 2:
        inner = _codec_of(next(arg for arg in args if arg is not type(None)))
        return _Codec((*inner.json_types, type(None)), f"{inner.expected} or null", _or_none(inner.dump),
                      _or_none(inner.load))
    if hint in (str, int, bool):
        return _Codec((hint,), hint.__name__)
    if hint is dict or origin is dict:  # JSON as it is: a node's inputs or outputs
        return _Codec((dict,), "an object")
    if origin is Literal:
        return _Codec(tuple({type(arg) for arg in args}), " or ".join(map(repr, args)), load=_one_of(args))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _list_of(_codec_of(args[0]))
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return _Codec((dict,), "an object", lambda model: model.model_dump(mode="json"),
                      _telling(hint.model_validate, ValueError, f"is an invalid {hint.__name__.lower()}"))
    if isinstance(hint, type) and issubclass(hint, WireMessage):
        return _Codec((dict,), "an object", hint._wire.dump, _telling(hint.from_wire, MessageRefused, "is refused"))
    raise TypeError(f"a message field cannot be a {hint!r}: give it a type JSON carries (str, int, bool, "
                    "a dict, a Literal, a tuple[X, ...], a pydantic model, a message, or one of those or None)")


def _or_none(convert: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
    """``convert``, passing ``None`` through untouched."""
    return None if convert is None else lambda value: None if value is None else convert(value)


def _one_of(allowed: tuple[Any, ...]) -> Callable[[Any], Any]:
    """A loader that lets only the values of a ``Literal`` through."""
    def load(value: Any) -> Any:
        if value not in allowed:
            raise ValueError(f"is {value!r}; expected {' or '.join(map(repr, allowed))}")
        return value
    return load


def _list_of(item: _Codec) -> _Codec:
    """The codec of a ``tuple[item, ...]``: a JSON list whose every element is checked as ``item`` is."""
    dump_item, load_item = item.dump, item.load

    def load(values: list[Any]) -> tuple[Any, ...]:
        for at, value in enumerate(values):
            if not item.accepts(value):
                raise ValueError(f"must be a list of {item.expected}, got {type(value).__name__} at [{at}]")
        return tuple(values) if load_item is None else tuple(map(load_item, values))
    dump = list if dump_item is None else (lambda values: list(map(dump_item, values)))
    return _Codec((list,), f"a list of {item.expected}", dump, load)


def _telling(load: Callable[[Any], Any], errors: type[Exception], phrase: str) -> Callable[[Any], Any]:
    """``load`` (of a nested model or message), its ``errors`` told as a ValueError: "<phrase>: <why>"."""
    def told(value: Any) -> Any:
        try:
            return load(value)
        except errors as exc:
            raise ValueError(f"{phrase}: {exc}") from None
    return told


class _Plan:
    """A message class's wire form, derived once from its dataclass fields and their annotations.

    Invariant: ``codecs`` has a key for every field (and ``kind`` first, when the class has one) in wire
    order; ``required`` is the fields without a default, and ``kind``."""

    __slots__ = ("what", "codecs", "known", "required", "has_kind", "dump", "make")

    def __init__(self, cls: type[WireMessage], what: str) -> None:
        hints = get_type_hints(cls)
        declared = fields(cls)  # type: ignore[arg-type]  # a dataclass: wire_message is applied after @dataclass
        kind = cls.__dict__.get("kind")
        self.what, self.has_kind = what, kind is not None
        self.make: Callable[..., Any] = cls
        self.codecs = {**({} if kind is None else {"kind": _Codec((str,), "str", load=_one_of((kind,)))}),
                       **{field.name: _codec_of(hints[field.name]) for field in declared}}
        self.known = frozenset(self.codecs)
        self.required = self.known - {field.name for field in declared
                                      if field.default is not MISSING or field.default_factory is not MISSING}
        self.dump = self._compiled_dump()

    def _compiled_dump(self) -> Callable[[Any], dict[str, Any]]:
        """``to_wire`` for this class, compiled from its fields the way ``dataclasses`` compiles ``__init__``: a
        loop over the fields costs three times a dict display, and every node call and completion takes it."""
        scope = {f"_dump_{name}": codec.dump for name, codec in self.codecs.items() if codec.dump is not None}
        entries = [f"{name!r}: _dump_{name}(m.{name})" if f"_dump_{name}" in scope else f"{name!r}: m.{name}"
                   for name in self.codecs]
        exec(f"def to_wire(m):\n    return {{{', '.join(entries)}}}\n", scope)
        scope["to_wire"].__doc__ = WireMessage.to_wire.__doc__
        return scope["to_wire"]  # type: ignore[no-any-return]


class WireMessage:
    """A dataclass that travels as a JSON object (see :func:`wire_message`)."""

    __slots__ = ()
    _wire: ClassVar[_Plan]

    def to_wire(self) -> dict[str, Any]:
        """The message as a JSON object: ``kind`` first where the class has one, then every field in order."""
        return self._wire.dump(self)

    @classmethod
    def from_wire(cls, data: Any) -> Self:
        """The message ``data`` stands for; :class:`MessageRefused` when it is not an object, misses a field
        without a default, has one the class does not know, or one of the wrong type."""
        plan = cls._wire
        if not isinstance(data, Mapping):
            raise MessageRefused(f"a {plan.what} must be a JSON object, got {type(data).__name__}")
        if not (plan.required <= data.keys() <= plan.known):
            raise _misfit(plan, data)
        values = {}
        codecs = plan.codecs
        for name, value in data.items():
            codec = codecs[name]
            try:
                if type(value) not in codec.json_types and not codec.accepts(value):
                    raise ValueError(f"must be {codec.expected}, got {type(value).__name__}")
                values[name] = value if codec.load is None else codec.load(value)
            except ValueError as exc:
                raise MessageRefused(f"refusing a {plan.what}: field {name!r} {exc}: {_sample(data)}") from None
        if plan.has_kind:
            del values["kind"]
        return plan.make(**values)  # type: ignore[no-any-return]


_M = TypeVar("_M", bound=type[WireMessage])


def wire_message(what: str) -> Callable[[_M], _M]:
    """Derive a message dataclass's wire form from its fields (put it above ``@dataclass``); ``what`` names
    the message in refusals ("refusing a <what>"). A field's annotation says what it may be on the wire: ``X | None``
    alone admits ``null``; a field without a default is required; a ``kind`` ClassVar is written on the wire."""
    def derive(cls: _M) -> _M:
        cls._wire = _Plan(cls, what)
        # In place of WireMessage.to_wire, which calls the same function: one call less per message sent.
        setattr(cls, "to_wire", cls._wire.dump)
        return cls
    return derive


def _misfit(plan: _Plan, data: Mapping[Any, Any]) -> MessageRefused:
    """The refusal of ``data`` whose fields are not the message's: which are missing, which unknown."""
    missing = [name for name in plan.codecs if name in plan.required and name not in data]
    unknown = sorted(str(name) for name in data if name not in plan.known)
    problems = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + (
        [f"unknown {', '.join(map(repr, unknown))}"] if unknown else [])
    return MessageRefused(f"refusing a {plan.what} with fields {' and '.join(problems)} "
                          f"(from a fluksio of another version?): {_sample(data)}")


def _sample(data: Any) -> str:
    return f"{data!r:.300}"


@wire_message("made artifact")
@dataclass(frozen=True, slots=True)
class MadeArtifact(WireMessage):
    """An artifact a node call stored: which message it is (part of), and what it is."""

    message: str
    digest: str
    size: int
    media_type: str = "application/octet-stream"
    name: str | None = None
    #: The codec that encoded a typed value into these bytes (``None``: the node returned an Artifact).
    codec: str | None = None


@wire_message("node call")
@dataclass(frozen=True, slots=True)
class NodeCall(WireMessage):
    """One node call, sent by a driver to the machine the placer granted (the call task's only argument)."""

    #: ``<run>[.r<epoch>].<node>.<attempt>``: the Celery task id, and the grant's id.
    call_id: str
    run_id: str
    flow: str
    node: str
    #: Counts from 1 over the run's whole life (a resumed run goes on counting).
    attempt: int
    #: The node's arguments by message name, as JSON (artifacts as references).
    inputs: dict[str, Any]
    grant: Grant
    #: The code the run was claimed with; a worker that loaded other code refuses the call.
    code_digest: str | None = None
    #: How often the run was resumed when its driver claimed it.
    epoch: int = 0
    #: The element of a mapped node this call is (``None``: the node is not mapped).
    index: int | None = None
    #: What to import from the code package ``code_digest`` names (a module, or a file's path in the
    #: package), for a worker that does not hold that code; ``None``: the code is not shipped.
    code_entry: str | None = None
    #: The submitter's signature over ``code_digest`` (a worker with ``FLUKSIO_ACCEPT_CODE=signed`` checks it).
    code_signature: str | None = None

    @property
    def unit(self) -> str:
        """``node``, or ``node[index]`` for an element: how logs, Flower and metric names call it."""
        return unit_of(self.node, self.index)

    def shown(self) -> dict[str, Any]:
        """Who the call is, without its inputs: what logs, events and Flower show of it."""
        return {"call_id": self.call_id, "run_id": self.run_id, "node": self.unit, "attempt": self.attempt}


@wire_message("completion")
@dataclass(frozen=True, slots=True)
class Completion(WireMessage):
    """How a node call ended, pushed by its worker onto the run's inbox."""

    call_id: str
    node: str
    attempt: int
    status: Literal["ok", "error"]
    #: Where it ran, and the GPU ids it held.
    machine: str | None = None
    gpus: tuple[int, ...] = ()
    #: ISO 8601 times (UTC); ``started_at`` is ``None`` for a call that never started.
    started_at: str | None = None
    finished_at: str | None = None
    #: The epoch of the drive that sent the call.
    epoch: int = 0
    #: The node's outputs by message, as JSON (``None`` unless ``ok``).
    outputs: dict[str, Any] | None = None
    artifacts: tuple[MadeArtifact, ...] = ()
    logs: str | None = None
    error: str | None = None
    #: The element of a mapped node the call was (``None``: not mapped).
    index: int | None = None
    #: Of a failure the node raised: its exception's class and bases (``flows.node.error_types``), what
    #: ``retry_on`` matches; empty for failures of the call's surroundings (a lost machine, a store outage).
    error_types: tuple[str, ...] = ()
    #: The attempt ran out of memory (a ``MemoryError``, or its process killed by SIGKILL: the OOM killer).
    oom: bool = False

    kind: ClassVar[str] = DONE

    @property
    def unit(self) -> str:
        return unit_of(self.node, self.index)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@wire_message("wake-up")
@dataclass(frozen=True, slots=True)
class Wake(WireMessage):
    """Something the driver waits for may have changed (a machine freed resources, or attached)."""

    kind: ClassVar[str] = WAKE


@wire_message("cancel request")
@dataclass(frozen=True, slots=True)
class Cancel(WireMessage):
    """Stop scheduling the run and kill its running calls."""

    kind: ClassVar[str] = CANCEL


@wire_message("child-ended message")
@dataclass(frozen=True, slots=True)
class ChildEnded(WireMessage):
    """A child run of this run (a subflow call) ended: its row says how."""

    run_id: str

    kind: ClassVar[str] = CHILD


#: What a run's inbox holds.
InboxMessage = Completion | Wake | Cancel | ChildEnded

#: Each inbox message's class by its ``kind`` on the wire.
_INBOX: dict[str, type[InboxMessage]] = {message.kind: message for message in (Completion, Wake, Cancel, ChildEnded)}


def inbox_message_from_wire(data: Any) -> InboxMessage:
    """The message a JSON object stands for; :class:`MessageRefused` when it is none of them."""
    kind = data.get("kind") if isinstance(data, Mapping) else None
    message = _INBOX.get(kind) if isinstance(kind, str) else None
    if message is None:
        raise MessageRefused(f"an inbox message must be a completion, a wake-up, a cancel or a child's end; got "
                             f"{_sample(data)}")
    return message.from_wire(data)
