"""Values crossing a node boundary: JSON passes, artifacts become references, anything else fails the node."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum, IntEnum
from pathlib import PurePosixPath
from uuid import UUID

import pytest
from pydantic import BaseModel

from fluksio.artifacts import Artifact, MemoryArtifactStore, digest_of
from fluksio.errors import NodeFailed
from fluksio.execution.values import decode, encode

WHERE = "message 'out' of node 'fit'"


class Metrics(BaseModel):
    accuracy: float
    labels: list[str]
    when: datetime


class Score(BaseModel):
    value: float


@pytest.fixture
def store():
    return MemoryArtifactStore()


def enc(value, store):
    made: list[Artifact] = []
    return encode(value, store, made, WHERE), made


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -7, 2**70, 1.5, -0.0, "", "text ✓", [], {}, [1, "a", None, [2.5, {"k": [True]}]],
     {"nested": {"deeper": [1, 2, {"x": None}]}, "n": 3}],
)
def test_json_values_pass_unchanged(value, store):
    encoded, made = enc(value, store)
    assert encoded == value
    assert made == []
    assert json.loads(json.dumps(encoded)) == value


def test_tuples_become_lists(store):
    encoded, _ = enc((1, (2, 3)), store)
    assert encoded == [1, [2, 3]]


def test_an_artifact_becomes_a_ref_and_is_stored(store):
    artifact = Artifact.from_bytes(b"weights", name="model.bin")
    encoded, made = enc({"model": artifact, "acc": 0.9}, store)
    assert encoded == {"model": artifact.to_ref(), "acc": 0.9}
    assert store.get(digest_of(b"weights")) == b"weights"
    assert made == [artifact]
    assert made[0].read_bytes() == b"weights"
    json.dumps(encoded)  # the message is plain JSON


def test_every_artifact_in_a_container_is_stored_and_reported(store):
    parts = [Artifact.from_bytes(bytes([i]) * 10, name=f"part{i}") for i in range(3)]
    encoded, made = enc({"parts": parts}, store)
    assert [ref["$artifact"]["name"] for ref in encoded["parts"]] == ["part0", "part1", "part2"]
    assert made == parts
    assert all(store.exists(p.digest) for p in parts)


def test_a_pydantic_model_is_dumped_as_json(store):
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    encoded, _ = enc(Metrics(accuracy=0.5, labels=["a", "b"], when=when), store)
    assert encoded == {"accuracy": 0.5, "labels": ["a", "b"], "when": "2026-01-02T03:04:05Z"}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_rejected_naming_where(bad, store):
    with pytest.raises(NodeFailed) as info:
        enc(bad, store)
    assert str(info.value).startswith(f"{WHERE} is {bad!r}, which JSON cannot carry")


def test_nan_deep_inside_is_rejected_with_its_path(store):
    with pytest.raises(NodeFailed) as info:
        enc({"scores": [1.0, math.nan]}, store)
    assert str(info.value).startswith(f"{WHERE}['scores'][1] is nan")


def test_nan_inside_a_pydantic_model_is_rejected(store):
    with pytest.raises(NodeFailed, match="which JSON cannot carry"):
        enc(Score(value=math.nan), store)


@pytest.mark.parametrize("key", [1, 2.5, None, (1, 2)])
def test_non_string_dict_keys_are_rejected(key, store):
    with pytest.raises(NodeFailed) as info:
        enc({key: "v"}, store)
    message = str(info.value)
    assert message.startswith(WHERE)
    assert f"has a key {key!r} of type {type(key).__name__}" in message
    assert "JSON keys are strings" in message


class Opaque:
    pass


@pytest.mark.parametrize(
    "value, type_name",
    [
        (Opaque(), f"{__name__}.Opaque"),
        (bytearray(b"raw"), "builtins.bytearray"),
        (complex(1, 2), "builtins.complex"),
        (object(), "builtins.object"),
    ],
)
def test_an_arbitrary_object_fails_the_node_naming_where_and_the_type(value, type_name, store):
    with pytest.raises(NodeFailed) as info:
        enc(value, store)
    message = str(info.value)
    assert message.startswith(f"{WHERE} is a {type_name}, which cannot cross a node boundary")
    assert "a pydantic model, a dataclass, an Artifact, or a value of a codec's type (bytes, " in message
    assert "numpy, pandas, pandas.series" in message  # with whatever codecs this process registered
    assert "fluksio.codecs.register" in message


def test_an_arbitrary_object_in_a_list_names_its_index(store):
    with pytest.raises(NodeFailed, match=r"\['items'\]\[2\] is a .*Opaque"):
        enc({"items": [1, 2, Opaque()]}, store)


def test_decode_turns_refs_into_artifacts_bound_to_the_store(store):
    artifact = Artifact.from_bytes(b"bytes inside", name="blob.bin")
    encoded, _ = enc({"blob": artifact, "list": [artifact, 1], "n": 2}, store)
    decoded = decode(json.loads(json.dumps(encoded)), store)
    assert isinstance(decoded["blob"], Artifact)
    assert decoded["blob"].read_bytes() == b"bytes inside"
    assert decoded["blob"].name == "blob.bin"
    assert isinstance(decoded["list"][0], Artifact)
    assert decoded["list"][1] == 1 and decoded["n"] == 2


def test_decode_leaves_plain_json_alone(store):
    value = {"a": [1, {"b": None}], "c": "d"}
    assert decode(value, store) == value


# -- typed values: what a node may return besides JSON ---------------------------------------------------


class Colour(Enum):
    RED = "red"


class Level(IntEnum):
    HIGH = 3


class Tone(str, Enum):
    WARM = "warm"


@dataclass
class Box:
    width: int
    day: date
    tags: tuple[str, ...]


def test_enum_members_travel_as_their_values_even_str_and_int_ones(store):
    encoded, _ = enc({"c": Colour.RED, "l": Level.HIGH, "t": Tone.WARM}, store)
    assert encoded == {"c": "red", "l": 3, "t": "warm"}
    assert [type(v) for v in encoded.values()] == [str, int, str]  # plain values, as another process sees them


def test_dataclasses_dates_and_the_leaves_pydantic_writes_become_json(store):
    value = {"box": Box(2, date(2026, 1, 2), ("a", "b")), "id": UUID(int=1), "price": Decimal("1.10"),
             "path": PurePosixPath("/data/x"), "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
             "span": timedelta(seconds=90)}
    encoded, made = enc(value, store)
    assert encoded == {"box": {"width": 2, "day": "2026-01-02", "tags": ["a", "b"]},
                       "id": "00000000-0000-0000-0000-000000000001", "price": "1.10", "path": "/data/x",
                       "at": "2026-01-02T03:04:05Z", "span": "PT1M30S"}
    assert made == []


def test_a_set_becomes_a_sorted_list_whatever_its_order_in_this_process(store):
    assert enc({"b", "c", "a"}, store)[0] == ["a", "b", "c"]
    assert enc(frozenset({3, 1, 2}), store)[0] == [1, 2, 3]
    assert enc({1, "a"}, store)[0] == ["a", 1]  # not comparable: ordered by their JSON text


def test_bytes_become_an_artifact_of_the_bytes_codec(store):
    made: list[Artifact] = []
    encoded = encode(b"\x00raw", store, made, WHERE, "blob")
    body = encoded["$artifact"]
    assert body["codec"] == "bytes" and body["name"] == "blob.bin" and body["size"] == 4
    assert store.get(body["digest"]) == b"\x00raw"
    assert [a.digest for a in made] == [body["digest"]]
    assert decode(encoded, store) == b"\x00raw"


def test_a_dataclass_field_that_cannot_cross_is_named_by_its_path(store):
    @dataclass
    class Holder:
        inner: object

    with pytest.raises(NodeFailed, match=r"^message 'out' of node 'fit'\.inner is a builtins\.object"):
        enc(Holder(object()), store)
