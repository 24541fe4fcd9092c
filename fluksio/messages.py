"""What a driver and the workers tell each other: a node call, its completion, and the driver's wake-ups.

Each message has one type, built in one place and read in one place. On the
wire it is a JSON object (a Celery task's argument, a Redis list entry); a
message from the broker with a field missing, a field nobody knows, or a field
of the wrong type is refused with :class:`~fluksio.errors.MessageRefused`,
never read half-way.

Within one process (the embedded default) the objects travel as they are:
nothing is encoded for an in-process queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

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


@dataclass(frozen=True, slots=True)
class MadeArtifact:
    """An artifact a node call stored: which message it is (part of), and what it is."""

    message: str
    digest: str
    size: int
    media_type: str = "application/octet-stream"
    name: str | None = None
    #: The codec that encoded a typed value into these bytes (``None``: the node returned an Artifact).
    codec: str | None = None


@dataclass(frozen=True, slots=True)
class NodeCall:
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

    _TYPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "call_id": (str,), "run_id": (str,), "flow": (str,), "node": (str,), "attempt": (int,),
        "inputs": (dict,), "grant": (dict,), "code_digest": (str, type(None)), "epoch": (int,),
        "index": (int, type(None)),
    }

    @property
    def unit(self) -> str:
        """``node``, or ``node[index]`` for an element: how logs, Flower and metric names call it."""
        return unit_of(self.node, self.index)

    def to_wire(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "run_id": self.run_id, "flow": self.flow, "node": self.node,
                "attempt": self.attempt, "inputs": self.inputs, "grant": self.grant.model_dump(mode="json"),
                "code_digest": self.code_digest, "epoch": self.epoch, "index": self.index}

    @classmethod
    def from_wire(cls, data: Any) -> NodeCall:
        values = _checked("node call", data, cls._TYPES, required=("call_id", "run_id", "flow", "node", "attempt",
                                                                     "inputs", "grant"))
        try:
            values["grant"] = Grant.model_validate(values["grant"])
        except ValueError as exc:
            raise MessageRefused(f"node call {values['call_id']!r} carries an invalid grant: {exc}") from None
        return cls(**values)

    def shown(self) -> dict[str, Any]:
        """Who the call is, without its inputs: what logs, events and Flower show of it."""
        return {"call_id": self.call_id, "run_id": self.run_id, "node": self.unit, "attempt": self.attempt}


@dataclass(frozen=True, slots=True)
class Completion:
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
    _TYPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "kind": (str,), "call_id": (str,), "node": (str,), "attempt": (int,), "status": (str,),
        "machine": (str, type(None)), "gpus": (list,), "started_at": (str, type(None)),
        "finished_at": (str, type(None)), "epoch": (int,), "outputs": (dict, type(None)), "artifacts": (list,),
        "logs": (str, type(None)), "error": (str, type(None)), "index": (int, type(None)), "error_types": (list,),
        "oom": (bool,),
    }

    @property
    def unit(self) -> str:
        return unit_of(self.node, self.index)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_wire(self) -> dict[str, Any]:
        return {"kind": DONE, "call_id": self.call_id, "node": self.node, "attempt": self.attempt,
                "status": self.status, "machine": self.machine, "gpus": list(self.gpus),
                "started_at": self.started_at, "finished_at": self.finished_at, "epoch": self.epoch,
                "outputs": self.outputs, "artifacts": [_artifact_to_wire(a) for a in self.artifacts],
                "logs": self.logs, "error": self.error, "index": self.index, "error_types": list(self.error_types),
                "oom": self.oom}

    @classmethod
    def from_wire(cls, data: Any) -> Completion:
        values = _checked("completion", data, cls._TYPES, required=("kind", "call_id", "node", "attempt", "status"))
        del values["kind"]
        if values["status"] not in ("ok", "error"):
            raise MessageRefused(f"completion of {values['call_id']!r} has status {values['status']!r}; "
                                 "expected 'ok' or 'error'")
        if not all(isinstance(g, int) for g in values.get("gpus", ())):
            raise MessageRefused(f"completion of {values['call_id']!r}: gpus must be whole numbers")
        values["gpus"] = tuple(values.get("gpus", ()))
        if not all(isinstance(t, str) for t in values.get("error_types", ())):
            raise MessageRefused(f"completion of {values['call_id']!r}: error_types must be names")
        values["error_types"] = tuple(values.get("error_types", ()))
        values["artifacts"] = tuple(_artifact_from_wire(values["call_id"], a) for a in values.get("artifacts", ()))
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Wake:
    """Something the driver waits for may have changed (a machine freed resources, or attached)."""

    kind: ClassVar[str] = WAKE

    def to_wire(self) -> dict[str, Any]:
        return {"kind": WAKE}


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop scheduling the run and kill its running calls."""

    kind: ClassVar[str] = CANCEL

    def to_wire(self) -> dict[str, Any]:
        return {"kind": CANCEL}


@dataclass(frozen=True, slots=True)
class ChildEnded:
    """A child run of this run (a subflow call) ended: its row says how."""

    run_id: str

    kind: ClassVar[str] = CHILD

    def to_wire(self) -> dict[str, Any]:
        return {"kind": CHILD, "run_id": self.run_id}


#: What a run's inbox holds.
InboxMessage = Completion | Wake | Cancel | ChildEnded


def inbox_message_from_wire(data: Any) -> InboxMessage:
    """The message a JSON object stands for; :class:`MessageRefused` when it is none of them."""
    kind = data.get("kind") if isinstance(data, Mapping) else None
    if kind == DONE:
        return Completion.from_wire(data)
    if kind in (WAKE, CANCEL) and len(data) == 1:
        return Wake() if kind == WAKE else Cancel()
    if kind == CHILD:
        checked = _checked("child-ended message", data, {"kind": (str,), "run_id": (str,)},
                           required=("kind", "run_id"))
        return ChildEnded(checked["run_id"])
    raise MessageRefused(f"an inbox message must be a completion, a wake-up, a cancel or a child's end; got "
                         f"{_sample(data)}")


_ARTIFACT_TYPES: dict[str, tuple[type, ...]] = {
    "message": (str,), "digest": (str,), "size": (int,), "media_type": (str,), "name": (str, type(None)),
    "codec": (str, type(None)),
}


def _artifact_to_wire(artifact: MadeArtifact) -> dict[str, Any]:
    return {"message": artifact.message, "digest": artifact.digest, "size": artifact.size,
            "media_type": artifact.media_type, "name": artifact.name, "codec": artifact.codec}


def _artifact_from_wire(call_id: str, data: Any) -> MadeArtifact:
    return MadeArtifact(**_checked(f"an artifact of {call_id!r}", data, _ARTIFACT_TYPES,
                                   required=("message", "digest", "size")))


def _checked(what: str, data: Any, types: Mapping[str, tuple[type, ...]], required: tuple[str, ...]
             ) -> dict[str, Any]:
    """``data`` as keyword arguments: every required field there, none unknown, each of its type."""
    if not isinstance(data, Mapping):
        raise MessageRefused(f"a {what} must be a JSON object, got {type(data).__name__}")
    missing = [name for name in required if name not in data]
    unknown = sorted(str(name) for name in data if name not in types)
    if missing or unknown:
        problems = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + (
            [f"unknown {', '.join(map(repr, unknown))}"] if unknown else [])
        raise MessageRefused(f"refusing a {what} with fields {' and '.join(problems)} "
                             f"(from a fluksio of another version?): {_sample(data)}")
    for name, value in data.items():
        # bool is an int to Python, never to the message: an attempt of True is refused.
        if not isinstance(value, types[name]) or (isinstance(value, bool) and bool not in types[name]):
            expected = " or ".join("null" if t is type(None) else t.__name__ for t in types[name])
            raise MessageRefused(f"refusing a {what}: field {name!r} must be {expected}, got "
                                 f"{type(value).__name__}: {_sample(data)}")
    return dict(data)


def _sample(data: Any) -> str:
    return f"{data!r:.300}"
