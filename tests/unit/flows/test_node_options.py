"""``NodeOptions`` is the one list of a node's options: ``Flow.node`` spells the same ones out, and a node
declared with none of them is ``NodeSpec``'s defaults."""

from __future__ import annotations

import dataclasses
import inspect

from fluksio.flows import flow as flow_module
from fluksio.flows.flow import Flow
from fluksio.flows.node import NodeOptions, NodeSpec


def test_flow_node_takes_exactly_the_node_options_with_their_defaults():
    # Flow.node's keywords are written out for IDEs and type checkers: an option added to one and not the
    # other, or given another default, fails here.
    parameters = inspect.signature(Flow.node).parameters.values()
    keywords = [(p.name, p.default) for p in parameters if p.kind is p.KEYWORD_ONLY]
    assert keywords == [(f.name, f.default) for f in dataclasses.fields(NodeOptions)]


def test_each_option_given_to_flow_node_reaches_make_node_under_its_name(monkeypatch):
    seen = []

    def make_node(fn, options, **_):
        seen.append(options)
        return NodeSpec(name="solve", fn=fn, requires=(), provides=())

    monkeypatch.setattr(flow_module, "make_node", make_node)
    given = {f.name: object() for f in dataclasses.fields(NodeOptions)}  # each unlike any other
    Flow("f").node(lambda: 1, **given)
    assert seen == [NodeOptions(**given)]


def test_a_node_declared_with_no_options_has_nodespecs_defaults():
    flow = Flow("f")

    def solve():
        return 1

    flow.node(solve)
    assert flow.nodes["solve"] == NodeSpec(name="solve", fn=solve, requires=(), provides=())
