"""Messages on the wire: each one's JSON form is derived from its dataclass fields, and whatever does not fit
them (a field missing or unknown, a bool for an int, a null where no None is allowed) is refused."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pytest

from fluksio.errors import MessageRefused
from fluksio.messages import (
    CANCEL,
    CHILD,
    DONE,
    WAKE,
    Cancel,
    ChildEnded,
    Completion,
    MadeArtifact,
    NodeCall,
    Wake,
    WireMessage,
    inbox_message_from_wire,
    wire_message,
)
from fluksio.schemas import Grant, Resources

GRANT = Grant(id="r.train.1", machine="m1", cpus=4, gpus=(0, 1), ram_mb=2048, incarnation="boot-1",
              clamped_from=Resources(cpus=8, gpus=4))
CALL = NodeCall(call_id="r.r2.train[3].1", run_id="r", flow="f", node="train", attempt=1, inputs={"x": [1, 2]},
                grant=GRANT, code_digest="sha256:c0de", epoch=2, index=3)
ARTIFACTS = (MadeArtifact("y", "sha256:1", 3), MadeArtifact("z", "sha256:2", 4, "text/plain", "z.txt", "json"))
DONE_OK = Completion(call_id="r.n.1", node="n", attempt=1, status="ok", outputs={"y": 1})
DONE_FULL = Completion(call_id="r.n.2", node="n", attempt=2, status="error", machine="m1", gpus=(1, 3),
                       started_at="2024-01-01T00:00:00+00:00", finished_at="2024-01-01T00:00:01+00:00", epoch=1,
                       artifacts=ARTIFACTS, logs="out", error="boom", index=0,
                       error_types=("ValueError", "Exception"), oom=True)


def through_json(wire: dict[str, Any]) -> Any:
    """What the other end reads: the object as the broker carries it."""
    return json.loads(json.dumps(wire))


@pytest.mark.parametrize("message", [CALL, DONE_OK, DONE_FULL, ARTIFACTS[1], Wake(), Cancel(), ChildEnded("c1")],
                         ids=lambda message: type(message).__name__)
def test_every_message_comes_back_equal_from_its_wire_form(message):
    assert type(message).from_wire(through_json(message.to_wire())) == message


@pytest.mark.parametrize("message", [DONE_OK, DONE_FULL, Wake(), Cancel(), ChildEnded("c1")],
                         ids=lambda message: type(message).__name__)
def test_an_inbox_message_is_read_back_by_its_kind(message):
    assert inbox_message_from_wire(through_json(message.to_wire())) == message


def test_the_wire_form_of_a_node_call_is_its_fields_in_order_with_the_grant_as_json():
    """Other processes, the Lua scripts and journaled Redis lists read these objects: keys and values are fixed."""
    wire = CALL.to_wire()
    assert list(wire) == ["call_id", "run_id", "flow", "node", "attempt", "inputs", "grant", "code_digest", "epoch",
                          "index", "code_entry", "code_signature"]
    assert wire == {"call_id": "r.r2.train[3].1", "run_id": "r", "flow": "f", "node": "train", "attempt": 1,
                    "inputs": {"x": [1, 2]}, "grant": GRANT.model_dump(mode="json"), "code_digest": "sha256:c0de",
                    "epoch": 2, "index": 3, "code_entry": None, "code_signature": None}
    assert wire["grant"]["gpus"] == [0, 1] and wire["grant"]["clamped_from"] == {"cpus": 8, "gpus": 4, "ram_mb": 0}


def test_the_wire_form_of_a_completion_starts_with_its_kind_and_carries_tuples_as_lists():
    wire = DONE_FULL.to_wire()
    assert list(wire)[:2] == ["kind", "call_id"]
    assert wire == {"kind": "done", "call_id": "r.n.2", "node": "n", "attempt": 2, "status": "error",
                    "machine": "m1", "gpus": [1, 3], "started_at": "2024-01-01T00:00:00+00:00",
                    "finished_at": "2024-01-01T00:00:01+00:00", "epoch": 1, "outputs": None,
                    "artifacts": [{"message": "y", "digest": "sha256:1", "size": 3,
                                   "media_type": "application/octet-stream", "name": None, "codec": None},
                                  {"message": "z", "digest": "sha256:2", "size": 4, "media_type": "text/plain",
                                   "name": "z.txt", "codec": "json"}],
                    "logs": "out", "error": "boom", "index": 0, "error_types": ["ValueError", "Exception"],
                    "oom": True}


def test_the_driver_s_own_messages_are_their_kind_alone():
    assert Wake().to_wire() == {"kind": WAKE} and Cancel().to_wire() == {"kind": CANCEL}
    assert ChildEnded("c1").to_wire() == {"kind": CHILD, "run_id": "c1"}
    assert DONE_OK.to_wire()["kind"] == DONE


def test_fields_with_a_default_may_be_left_out():
    assert Completion.from_wire({"kind": "done", "call_id": "r.n.1", "node": "n", "attempt": 1, "status": "ok"}) \
        == Completion(call_id="r.n.1", node="n", attempt=1, status="ok")


@pytest.mark.parametrize("field", ["attempt", "epoch", "index"])
def test_a_bool_is_never_taken_for_an_int(field):
    with pytest.raises(MessageRefused, match=f"field '{field}' must be int.*, got bool"):
        NodeCall.from_wire({**CALL.to_wire(), field: True})


def test_a_bool_is_never_taken_for_a_gpu_id_or_an_artifact_size():
    with pytest.raises(MessageRefused, match=r"'gpus' must be a list of int, got bool at \[1\]"):
        Completion.from_wire({**DONE_OK.to_wire(), "gpus": [0, True]})
    artifact = {**ARTIFACTS[0].to_wire(), "size": False}
    with pytest.raises(MessageRefused, match="'artifacts' is refused: .* 'size' must be int, got bool"):
        Completion.from_wire({**DONE_OK.to_wire(), "artifacts": [artifact]})


@pytest.mark.parametrize("field", ["node", "attempt", "status", "gpus", "epoch", "artifacts", "oom"])
def test_null_is_refused_where_the_field_may_not_be_none(field):
    with pytest.raises(MessageRefused, match=f"field '{field}' must be .*, got NoneType"):
        Completion.from_wire({**DONE_OK.to_wire(), field: None})


def test_null_is_taken_where_the_field_may_be_none():
    wire = {**DONE_FULL.to_wire(), "machine": None, "outputs": None, "index": None, "logs": None}
    assert Completion.from_wire(wire).machine is None and Completion.from_wire(wire).index is None


def test_a_field_nobody_knows_is_refused_as_from_another_version():
    with pytest.raises(MessageRefused, match=r"unknown 'priority' \(from a fluksio of another version\?\)"):
        NodeCall.from_wire({**CALL.to_wire(), "priority": 3})


def test_a_missing_field_without_a_default_is_refused_and_named():
    wire = CALL.to_wire()
    del wire["grant"], wire["attempt"]
    with pytest.raises(MessageRefused, match=r"node call with fields missing 'attempt', 'grant' \(from a fluksio"):
        NodeCall.from_wire(wire)


def test_missing_and_unknown_fields_are_named_together():
    wire = {**DONE_OK.to_wire(), "extra": 1}
    del wire["node"]
    with pytest.raises(MessageRefused, match="missing 'node' and unknown 'extra'"):
        Completion.from_wire(wire)


@pytest.mark.parametrize("data", [None, [], "done", 3])
def test_what_is_not_a_json_object_is_refused(data):
    with pytest.raises(MessageRefused, match="a node call must be a JSON object"):
        NodeCall.from_wire(data)


def test_a_completion_is_ok_or_an_error_and_nothing_else():
    with pytest.raises(MessageRefused, match="'status' is 'maybe'; expected 'ok' or 'error'"):
        Completion.from_wire({**DONE_OK.to_wire(), "status": "maybe"})


def test_error_types_must_be_names():
    with pytest.raises(MessageRefused, match=r"'error_types' must be a list of str, got int at \[0\]"):
        Completion.from_wire({**DONE_OK.to_wire(), "error_types": [1]})


def test_a_call_with_an_invalid_grant_is_refused():
    with pytest.raises(MessageRefused, match="'grant' is an invalid grant"):
        NodeCall.from_wire({**CALL.to_wire(), "grant": {"id": "r.train.1"}})
    with pytest.raises(MessageRefused, match="'grant' must be an object"):
        NodeCall.from_wire({**CALL.to_wire(), "grant": [1]})


def test_a_message_of_another_kind_is_not_read_as_a_completion():
    with pytest.raises(MessageRefused, match="'kind' is 'wake'; expected 'done'"):
        Completion.from_wire({**DONE_OK.to_wire(), "kind": "wake"})


def test_a_wake_up_or_a_cancel_carries_nothing_but_its_kind():
    with pytest.raises(MessageRefused, match="wake-up with fields unknown 'run_id'"):
        inbox_message_from_wire({"kind": "wake", "run_id": "r"})
    with pytest.raises(MessageRefused, match="cancel request with fields unknown 'now'"):
        inbox_message_from_wire({"kind": "cancel", "now": True})


def test_a_child_s_end_names_the_child():
    with pytest.raises(MessageRefused, match="child-ended message with fields missing 'run_id'"):
        inbox_message_from_wire({"kind": "child"})


@pytest.mark.parametrize("data", [{"kind": "started"}, {"kind": ["done"]}, {}, "wake", None])
def test_an_inbox_message_of_no_known_kind_is_refused(data):
    with pytest.raises(MessageRefused, match="an inbox message must be a completion, a wake-up"):
        inbox_message_from_wire(data)


@wire_message("test report")
@dataclass(frozen=True, slots=True)
class Report(WireMessage):
    """A message only this test module knows: its fields are all it takes to travel."""

    name: str
    count: int
    state: Literal["new", "old"]
    grant: Grant
    artifacts: tuple[MadeArtifact, ...]
    note: str | None = None
    flags: tuple[bool, ...] = ()
    #: The field added last: declaring it is all it takes.
    added: int = 7

    kind: ClassVar[str] = "report"


def test_a_new_message_travels_by_declaring_its_fields_alone():
    report = Report("a", 2, "new", GRANT, ARTIFACTS, note="n", flags=(True, False), added=9)
    wire = report.to_wire()
    assert list(wire) == ["kind", "name", "count", "state", "grant", "artifacts", "note", "flags", "added"]
    assert wire["flags"] == [True, False] and wire["grant"] == GRANT.model_dump(mode="json")
    assert Report.from_wire(through_json(wire)) == report


def test_a_new_field_with_a_default_lets_messages_of_before_it_in_and_is_checked_when_present():
    wire = Report("a", 2, "old", GRANT, ()).to_wire()
    del wire["added"]
    assert Report.from_wire(wire).added == 7
    with pytest.raises(MessageRefused, match="test report: field 'added' must be int, got bool"):
        Report.from_wire({**wire, "added": False})
    with pytest.raises(MessageRefused, match="field 'flags' must be a list of bool, got int"):
        Report.from_wire({**wire, "flags": [1]})


def test_a_field_no_json_carries_is_refused_when_the_class_is_defined():
    with pytest.raises(TypeError, match="a message field cannot be a <class 'float'>"):
        @wire_message("bad")
        @dataclass(frozen=True, slots=True)
        class Bad(WireMessage):
            ratio: float
