"""Annotations drive decoding: what a node returns, after JSON, arrives validated into the parameter's type."""

from __future__ import annotations

import dataclasses
import json
from datetime import date, datetime, timezone
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
import pandas as pd
import pytest
from pydantic import BaseModel

from fluksio import Artifact, Flow
from fluksio.artifacts import MemoryArtifactStore
from fluksio.errors import FlowError, NodeFailed
from fluksio.execution.values import encode, receive
from fluksio.flows.node import NodeSpec


class Cfg(BaseModel):
    lr: float
    day: date


class Colour(Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Box:
    width: int
    day: date
    colour: Colour


@pytest.fixture
def store() -> MemoryArtifactStore:
    return MemoryArtifactStore()


def node_taking(annotation: Any, mapped: bool = False) -> NodeSpec:
    """A node whose one parameter ``x`` carries ``annotation`` (none when it is ``inspect.Parameter.empty``)."""
    def fn(x):  # type: ignore[no-untyped-def]
        return x

    if annotation is not None:
        fn.__annotations__ = {"x": annotation}
    flow = Flow("typed")
    flow.node(fn, name="take", provides="y", requires=["xs" if mapped else "m"],
              map={"x": "xs"} if mapped else None)
    return flow.nodes["take"]


def through(value: Any, annotation: Any, store: MemoryArtifactStore) -> Any:
    """``value`` returned by one node, carried as JSON, received by a parameter annotated ``annotation``."""
    wire = json.loads(json.dumps(encode(value, store, [], "message 'm' of node 'make'", "m")))
    return receive(node_taking(annotation), "x", "m", wire, store)


@pytest.mark.parametrize("value, annotation", [
    (Cfg(lr=0.1, day=date(2026, 1, 2)), Cfg),
    (Box(3, date(2026, 1, 2), Colour.BLUE), Box),
    (Colour.RED, Colour),
    (datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), datetime),
    (date(2026, 1, 2), date),
    (UUID(int=7), UUID),
    (Decimal("1.10"), Decimal),
    (Path("/data/run/x.csv"), Path),
    ((1, "a", 2.5), tuple[int, str, float]),
    ({"b", "a"}, set[str]),
    ({"cfgs": [Cfg(lr=0.2, day=date(2026, 3, 4))]}, dict[str, list[Cfg]]),
    ([Box(1, date(2026, 1, 1), Colour.RED), None], list[Box | None]),
])
def test_an_annotated_parameter_receives_the_type_the_node_returned(value, annotation, store):
    received = through(value, annotation, store)
    assert type(received) is type(value)
    assert received == value


def test_without_an_annotation_the_json_value_arrives_as_it_is(store):
    assert through(Cfg(lr=0.1, day=date(2026, 1, 2)), None, store) == {"lr": 0.1, "day": "2026-01-02"}
    assert through(Colour.RED, Any, store) == "red"


def test_a_codec_value_arrives_as_its_type_annotated_or_not(store):
    frame = pd.DataFrame({"t": pd.date_range("2026-01-01", periods=3, freq="h"), "x": [1.5, 2.5, 3.5]})
    for annotation in (None, pd.DataFrame):
        pd.testing.assert_frame_equal(through(frame, annotation, store), frame)
    got = through({"a": np.arange(3), "b": [np.ones(2)]}, dict[str, Any], store)
    assert isinstance(got["a"], np.ndarray) and got["a"].tolist() == [0, 1, 2]
    assert isinstance(got["b"][0], np.ndarray) and got["b"][0].tolist() == [1.0, 1.0]


def test_a_parameter_annotated_artifact_gets_the_stored_file_of_a_codec_value(store):
    received = through(np.arange(4.0), Artifact, store)
    assert isinstance(received, Artifact) and received.name == "m.npy"
    assert np.load(received.path).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_mapped_parameter_is_annotated_with_the_element_type(store):
    shards = [pd.DataFrame({"x": [i, i + 1]}) for i in range(3)]
    wire = json.loads(json.dumps(encode(shards, store, [], "message 'xs' of node 'split'", "xs")))
    node = node_taking(pd.DataFrame, mapped=True)
    received = [receive(node, "x", "xs", element, store) for element in wire]  # one call per element
    for got, shard in zip(received, shards):
        pd.testing.assert_frame_equal(got, shard)


@pytest.mark.parametrize("value, annotation, expected", [
    ({"lr": 0.1}, Cfg, "must be test_receive.Cfg: at day: Field required (got {'lr': 0.1})"),
    ({"lr": 0.1, "day": "soon"}, Cfg, "must be test_receive.Cfg: at day: Input should be a valid date"),
    ("abc", int, "must be int: Input should be a valid integer, unable to parse string as an integer (got 'abc')"),
    ("green", Colour, "must be test_receive.Colour: Input should be 'red' or 'blue' (got 'green')"),
    (np.arange(3), pd.DataFrame, "must be pandas.DataFrame: Input should be an instance of DataFrame (got a "
                                 "numpy.ndarray of shape (3,))"),
])
def test_a_value_that_does_not_fit_fails_naming_message_parameter_type_and_what(value, annotation, expected, store):
    with pytest.raises(NodeFailed) as info:
        through(value, annotation, store)
    message = str(info.value)
    assert message.startswith("message 'm' for parameter 'x' of node 'take' ")
    assert expected in message


def test_a_reference_to_a_codec_this_process_lacks_fails_saying_how_to_register_it(store):
    ref = encode(np.arange(2), store, [], "w", "m")
    ref["$artifact"]["codec"] = "torch.safetensors"
    with pytest.raises(NodeFailed) as info:
        receive(node_taking(None), "x", "m", ref, store)
    message = str(info.value)
    assert message.startswith("message 'm' for parameter 'x' of node 'take': no codec named 'torch.safetensors'")
    assert "fluksio.codecs.register" in message and "FLUKSIO_FLOWS" in message


def test_an_annotation_that_cannot_be_resolved_fails_the_declaration():
    flow = Flow("unresolved")
    with pytest.raises(FlowError, match=r"node 'step' of flow 'unresolved': cannot resolve the annotations .*"
                                        r"NameError.*import them at module level"):
        @flow.node(provides="y")
        def step(x: "NoSuchType") -> int:  # type: ignore[name-defined] # noqa: F821
            return 1


def test_a_dataclass_holding_arrays_without_pydantic_config_fails_the_declaration_saying_what_to_do():
    @dataclasses.dataclass
    class Batch:
        values: np.ndarray

    flow = Flow("batch")

    def use(batch: Batch) -> int:
        return 1

    with pytest.raises(FlowError, match=r"node 'use' of flow 'batch', parameter 'batch': pydantic cannot validate "
                                        r"values of .*Batch.*arbitrary_types_allowed"):
        flow.node(use, provides="y")


def test_a_class_defined_where_the_node_is_declared_is_resolved():
    class Local(BaseModel):
        n: int

    flow = Flow("local")

    @flow.node(provides="y")
    def use(item: Local) -> int:
        return item.n

    assert flow.nodes["use"].types == {"item": Local}


def test_an_unannotated_parameter_bound_to_a_flow_input_receives_the_inputs_declared_type(store):
    flow = Flow("declared", inputs={"cfg": Cfg, "days": list[date], "n": int})

    @flow.node(provides="y")
    def plain(cfg, n):  # no annotations: the flow's declaration is theirs
        return n

    @flow.node(provides="z", map={"day": "days"})
    def each(day):
        return day

    @flow.node(provides="w")
    def own(cfg: dict):  # an annotation of its own wins
        return cfg

    assert flow.nodes["plain"].types == {"cfg": Cfg, "n": int}
    assert flow.nodes["each"].types == {"day": date}  # one element of the list
    assert flow.nodes["own"].types == {"cfg": dict}
    wire = {"lr": 0.5, "day": "2026-02-03"}  # what submit stored for a Cfg
    assert receive(flow.nodes["plain"], "cfg", "cfg", wire, store) == Cfg(lr=0.5, day=date(2026, 2, 3))
    assert receive(flow.nodes["each"], "day", "days", "2026-02-03", store) == date(2026, 2, 3)
    assert receive(flow.nodes["own"], "cfg", "cfg", wire, store) == wire

