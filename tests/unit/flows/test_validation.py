"""Whole-graph checks: one provider per message, everything required is provided, no cycles."""

from __future__ import annotations

import re

import pytest

from fluksio.errors import FlowError
from fluksio.flows.flow import Flow
from fluksio.flows.validation import (
    INPUT,
    find_cycle,
    providers_of,
    topological_order,
    validate_graph,
)


def test_a_valid_graph_passes_and_maps_providers():
    flow = Flow("f", inputs={"x": int}, outputs=["z"])
    flow.node(lambda x: x, name="a", provides="y")
    flow.node(lambda y, emit: y, name="b", provides="z", streams=["loss"])
    assert flow.validate().providers == {"x": INPUT, "y": "a", "z": "b", "loss": "b"}


def test_a_flow_with_no_nodes_is_rejected():
    with pytest.raises(FlowError, match="flow 'empty' has no nodes; add one with @flow.node"):
        Flow("empty", inputs={"x": int}).validate()


def test_a_message_nobody_provides_is_rejected_naming_it_and_its_reader():
    flow = Flow("f", inputs={"x": int})
    flow.node(lambda x, missing: x, name="step", provides="y")
    with pytest.raises(FlowError) as info:
        flow.validate()
    message = str(info.value)
    assert "nobody provides 'missing' (required by 'step')" in message
    assert "known messages: x, y" in message


def test_a_parameter_with_no_matching_input_or_message_is_rejected():
    flow = Flow("train", inputs={"lr": float})

    @flow.node(provides="model")
    def fit(lr, epochs):  # 'epochs' is neither an input nor any node's output
        ...

    with pytest.raises(FlowError, match=r"nobody provides 'epochs' \(required by 'fit'\)"):
        flow.validate()


def test_every_missing_message_is_named_at_once():
    flow = Flow("f")
    flow.node(lambda p: p, name="one", provides="a")
    flow.node(lambda q: q, name="two", provides="b")
    with pytest.raises(FlowError) as info:
        flow.validate()
    assert "'p' (required by 'one')" in str(info.value)
    assert "'q' (required by 'two')" in str(info.value)
    assert "known messages: a, b" in str(info.value)


def test_two_nodes_providing_one_message_are_rejected():
    flow = Flow("f", inputs={"x": int})
    flow.node(lambda x: x, name="left", provides="m")
    flow.node(lambda x: x, name="right", provides="m")
    with pytest.raises(FlowError, match="'m' by node 'left' and node 'right' provide it"):
        flow.validate()


def test_a_node_providing_a_flow_input_is_rejected():
    flow = Flow("f", inputs={"x": int})
    flow.node(lambda: 1, name="maker", provides="x")
    with pytest.raises(FlowError, match="'x' by the inputs and node 'maker'"):
        flow.validate()


def test_a_stream_and_a_provide_of_the_same_name_in_two_nodes_clash():
    flow = Flow("f", inputs={"x": int})
    flow.node(lambda x, emit: x, name="a", provides="y", streams=["loss"])
    flow.node(lambda x: x, name="b", provides="loss")
    with pytest.raises(FlowError, match="one provider"):
        flow.validate()


def test_an_output_nobody_provides_is_rejected():
    flow = Flow("f", inputs={"x": int}, outputs=["y", "ghost"])
    flow.node(lambda x: x, name="a", provides="y")
    with pytest.raises(FlowError, match=r"output\(s\) 'ghost' are provided by no node or input"):
        flow.validate()


def test_an_output_may_be_an_input():
    flow = Flow("f", inputs={"x": int}, outputs=["x", "y"])
    flow.node(lambda x: x, name="a", provides="y")
    assert flow.validate().result_messages == ["x", "y"]


def test_a_cycle_is_rejected_naming_its_nodes():
    flow = Flow("loop", inputs={"x": int})
    flow.node(lambda x: x, name="start", provides="s")
    flow.node(lambda s, c: s, name="a", provides="a_out")
    flow.node(lambda a_out: a_out, name="b", provides="b_out")
    flow.node(lambda b_out: b_out, name="c", provides="c")
    with pytest.raises(FlowError) as info:
        flow.validate()
    message = str(info.value)
    assert message.startswith("flow 'loop' has a cycle: ")
    path = message.split(": ", 1)[1].split(" -> ")
    assert path[0] == path[-1]  # closed
    assert sorted(path[:-1]) == ["a", "b", "c"]  # exactly the nodes on the cycle, not 'start'


def test_a_node_requiring_its_own_output_is_a_cycle():
    flow = Flow("f")
    flow.node(lambda y: y, name="selfish", provides="y")
    with pytest.raises(FlowError, match="has a cycle: selfish -> selfish"):
        flow.validate()


def test_a_diamond_is_not_a_cycle():
    flow = Flow("f", inputs={"x": int})
    flow.node(lambda x: x, name="top", provides="t")
    flow.node(lambda t: t, name="left", provides="l")
    flow.node(lambda t: t, name="right", provides="r")
    flow.node(lambda l, r: l, name="bottom", provides="b")  # noqa: E741
    flow.validate()
    assert find_cycle(flow.nodes, flow.providers) == []
    assert flow.order == ["top", "left", "right", "bottom"]


def test_find_cycle_on_a_two_node_cycle():
    flow = Flow("f")
    flow.node(lambda q: q, name="p", provides="pp")
    flow.node(lambda pp: pp, name="q_node", provides="q")
    providers = providers_of(flow.inputs, flow.nodes, "f")
    cycle = find_cycle(flow.nodes, providers)
    assert cycle[0] == cycle[-1]
    assert set(cycle) == {"p", "q_node"} and len(cycle) == 3


def test_topological_order_refuses_a_cycle_when_called_directly():
    flow = Flow("f")
    flow.node(lambda q: q, name="p", provides="pp")
    flow.node(lambda pp: pp, name="q_node", provides="q")
    providers = providers_of(flow.inputs, flow.nodes, "f")
    with pytest.raises(FlowError, match="cycle among p, q_node"):
        topological_order(flow.nodes, providers)


def test_validate_graph_names_the_flow_in_every_message():
    flow = Flow("named-flow", inputs={"x": int})
    flow.node(lambda x, nope: x, name="a", provides="y")
    with pytest.raises(FlowError, match=re.escape("flow 'named-flow':")):
        validate_graph(flow.name, flow.inputs, flow.nodes, None)


def test_order_is_a_valid_topological_order_for_a_wide_graph():
    flow = Flow("wide", inputs={"x": int})
    # declared bottom-up so a naive declaration order would be wrong
    flow.node(lambda m0, m1, m2, m3: 0, name="sink", provides="out")
    for i in range(4):
        flow.node(lambda base: base, name=f"mid{i}", provides=f"m{i}", requires=["base"])
    flow.node(lambda x: x, name="source", provides="base")
    order = flow.order
    assert order[0] == "source" and order[-1] == "sink"
    assert order[1:5] == ["mid0", "mid1", "mid2", "mid3"]
