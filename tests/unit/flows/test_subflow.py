"""Declaring subflows: how a child's inputs are filled, what it provides, and flows that would contain themselves."""

from __future__ import annotations

import pytest

from fluksio import Flow, FlowError, Message
from fluksio.flows.registry import FlowRegistry


def train() -> Flow:
    flow = Flow("train", inputs={"lr": float, "epochs": int, "seed": int, "decay": (float, 0.0)},
                outputs=["model", "accuracy"])
    flow.node(lambda lr, epochs, seed, decay: lr, name="fit", provides="model")
    flow.node(lambda model: 0.9, name="score", provides="accuracy")
    return flow


def test_inputs_come_from_map_elements_params_renames_and_same_named_messages() -> None:
    search = Flow("search", inputs={"n": int, "epochs": int, "seed": int, "rate_decay": float})
    search.node(lambda n: [0.1] * n, name="propose", provides="lrs")
    spec = search.subflow(train(), name="trial", map={"lr": "lrs"}, provides={"accuracy": "accuracies"},
                          params={"decay": Message("rate_decay")})
    search.validate()
    spec = search.nodes["trial"]
    assert dict(zip(spec.params, spec.requires)) == {"lr": "lrs", "epochs": "epochs", "seed": "seed",
                                                     "decay": "rate_decay"}
    assert spec.map == (("lr", "lrs"),) and spec.provides == ("accuracies",)
    assert spec.subflow is not None and spec.subflow.outputs == (("accuracies", "accuracy"),)


def test_a_defaulted_input_nobody_provides_is_left_to_the_childs_default() -> None:
    search = Flow("search", inputs={"epochs": int, "seed": int, "lr": float})
    search.subflow(train(), name="trial", params={"epochs": 3})
    search.validate()
    spec = search.nodes["trial"]
    assert dict(zip(spec.params, spec.requires)) == {"lr": "lr", "seed": "seed"}  # decay: the child's default
    assert spec.subflow is not None and spec.subflow.constants == (("epochs", 3),)
    assert spec.provides == ("model", "accuracy")  # by default: the child's declared outputs, same names


def test_a_child_input_that_nothing_fills_and_has_no_default_is_named_when_the_parent_is_validated() -> None:
    search = Flow("search", inputs={"seed": int})
    search.subflow(train(), name="trial", params={"lr": 0.1})
    with pytest.raises(FlowError, match=r"nobody provides 'epochs' \(required by 'trial'\)"):
        search.validate()


def test_unknown_inputs_outputs_and_map_keys_are_refused_naming_what_exists() -> None:
    search = Flow("search", inputs={"lrs": list[float]})
    with pytest.raises(FlowError, match=r"params names 'rate', which is not an input of flow 'train'"):
        search.subflow(train(), name="a", params={"rate": 1})
    with pytest.raises(FlowError, match=r"flow 'train' has no output 'loss' \(its outputs: accuracy, model\)"):
        search.subflow(train(), name="b", provides=["loss"])
    with pytest.raises(FlowError, match=r"map key 'rate' is not an input of flow 'train'"):
        search.subflow(train(), name="c", map={"rate": "lrs"})


def test_a_flow_that_contains_itself_directly_or_through_another_is_refused_naming_the_cycle() -> None:
    outer = Flow("outer", inputs={"x": int})
    with pytest.raises(FlowError, match=r"flow 'outer' cannot contain itself: outer -> outer"):
        outer.subflow(outer, name="again")
    inner = Flow("inner", inputs={"x": int})
    inner.node(lambda x: x, name="step", provides="y")
    outer.subflow(inner, name="child", provides=["y"])
    with pytest.raises(FlowError, match=r"flow 'inner' cannot contain itself: inner -> outer -> inner"):
        inner.subflow(outer, name="back")


def test_subflows_nest_five_deep_and_register_with_their_parent() -> None:
    flow = Flow("level0", inputs={"x": int}, outputs=["y"])
    flow.node(lambda x: x + 1, name="step", provides="y")
    for depth in range(1, 6):
        parent = Flow(f"level{depth}", inputs={"x": int}, outputs=["y"])
        parent.subflow(flow, name="inner", provides=["y"])
        flow = parent
    registry = FlowRegistry()
    registry.register(flow)
    assert registry.names() == [f"level{i}" for i in range(6)]
    assert len(flow.subflows()) == 5


def test_max_parallel_of_a_subflow_needs_a_map() -> None:
    with pytest.raises(FlowError, match="has no map="):
        Flow("s", inputs={"lr": float, "epochs": int, "seed": int}).subflow(train(), max_parallel=2)
