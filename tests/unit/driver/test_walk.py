"""The driver's bookkeeping: which nodes are ready, what a failure skips, when a run has drained."""

from __future__ import annotations

from fluksio.driver.walk import NodeState, Walk
from fluksio.flows.flow import Flow


def branching_flow(outputs=None) -> Flow:
    """x -> load -> data -> {clean -> cleaned -> fit -> model, stats -> summary}; report needs model+summary."""
    flow = Flow("branching", inputs={"x": int, "seed": (int, 0)}, outputs=outputs)
    flow.node(lambda x: x, name="load", provides="data")
    flow.node(lambda data: data, name="clean", provides="cleaned")
    flow.node(lambda cleaned: cleaned, name="fit", provides="model")
    flow.node(lambda data: data, name="stats", provides="summary")
    flow.node(lambda model, summary: 0, name="report", provides="text")
    return flow


def independent_flow() -> Flow:
    flow = Flow("independent", inputs={"x": int})
    flow.node(lambda x: x, name="a", provides="a_out")
    flow.node(lambda x: x, name="b", provides="b_out")
    flow.node(lambda a_out: a_out, name="after_a", provides="a2")
    flow.node(lambda b_out: b_out, name="after_b", provides="b2")
    return flow


def run_node(walk: Walk, node: str, outputs: dict) -> None:
    walk.start(node)
    walk.complete(node, outputs)


def test_nodes_whose_inputs_are_params_are_ready_first():
    walk = Walk(branching_flow(), {"x": 1})
    assert walk.ready() == ["load"]
    assert set(walk.state) == {"load", "clean", "stats", "fit", "report"}
    assert set(walk.state.values()) == {NodeState.PENDING}


def test_unknown_params_are_not_messages():
    walk = Walk(branching_flow(), {"x": 1, "stray": 2})
    assert "stray" not in walk.messages
    assert walk.messages == {"x": 1}


def test_independent_branches_are_ready_together():
    walk = Walk(independent_flow(), {"x": 1})
    assert walk.ready() == ["a", "b"]
    run_node(walk, "a", {"a_out": 1})
    run_node(walk, "b", {"b_out": 2})
    assert walk.ready() == ["after_a", "after_b"]


def test_a_node_becomes_ready_once_all_its_inputs_are_available():
    walk = Walk(branching_flow(), {"x": 1})
    run_node(walk, "load", {"data": [1]})
    assert walk.ready() == ["clean", "stats"]
    run_node(walk, "clean", {"cleaned": [1]})
    run_node(walk, "stats", {"summary": "s"})
    assert walk.ready() == ["fit"]  # report still waits for 'model'
    run_node(walk, "fit", {"model": "m"})
    assert walk.ready() == ["report"]
    assert walk.inputs_of("report") == {"model": "m", "summary": "s"}


def test_a_started_node_is_no_longer_ready_and_keeps_the_walk_undrained():
    walk = Walk(branching_flow(), {"x": 1})
    walk.start("load")
    assert walk.ready() == []
    assert walk.running() == ["load"]
    assert walk.drained is False


def test_inputs_of_binds_required_messages():
    walk = Walk(branching_flow(), {"x": 7})
    assert walk.inputs_of("load") == {"x": 7}


def test_input_defaults_not_given_are_not_messages():
    flow = Flow("f", inputs={"x": int, "seed": (int, 0)})
    flow.node(lambda seed: seed, name="uses_seed", provides="y")
    walk = Walk(flow, {"x": 1})  # submit fills defaults; the walk only knows what it is given
    assert walk.ready() == []
    assert walk.drained is True


def test_fail_skips_everything_downstream_transitively():
    walk = Walk(branching_flow(), {"x": 1})
    walk.start("load")
    skipped = walk.fail("load")
    assert sorted(skipped) == ["clean", "fit", "report", "stats"]
    assert walk.state["load"] is NodeState.FAILED
    assert all(walk.state[n] is NodeState.SKIPPED for n in skipped)
    assert walk.failed() == ["load"]
    assert walk.drained is True


def test_fail_leaves_independent_branches_running():
    walk = Walk(branching_flow(), {"x": 1})
    run_node(walk, "load", {"data": [1]})
    walk.start("clean")
    walk.start("stats")
    skipped = walk.fail("clean")
    assert skipped == ["fit", "report"]
    assert walk.state["stats"] is NodeState.RUNNING
    assert walk.drained is False
    walk.complete("stats", {"summary": "s"})
    assert walk.state["stats"] is NodeState.DONE
    assert walk.ready() == []
    assert walk.drained is True


def test_fail_in_one_branch_leaves_the_other_branch_ready():
    walk = Walk(independent_flow(), {"x": 1})
    walk.start("a")
    walk.start("b")
    assert walk.fail("a") == ["after_a"]
    walk.complete("b", {"b_out": 2})
    assert walk.ready() == ["after_b"]
    assert walk.state["after_a"] is NodeState.SKIPPED


def test_fail_reports_only_the_nodes_it_newly_skipped():
    walk = Walk(independent_flow(), {"x": 1})
    walk.start("a")
    walk.start("b")
    assert walk.fail("a") == ["after_a"]
    assert walk.fail("b") == ["after_b"]


def test_cancel_pending_cancels_only_pending_nodes():
    walk = Walk(branching_flow(), {"x": 1})
    run_node(walk, "load", {"data": [1]})
    walk.start("clean")
    cancelled = walk.cancel_pending()
    assert sorted(cancelled) == ["fit", "report", "stats"]
    assert walk.state["load"] is NodeState.DONE
    assert walk.state["clean"] is NodeState.RUNNING
    assert all(walk.state[n] is NodeState.CANCELLED for n in cancelled)
    assert walk.ready() == []
    assert walk.drained is False  # 'clean' still runs
    walk.fail("clean")
    assert walk.drained is True
    assert walk.cancel_pending() == []


def test_drained_when_everything_completed():
    walk = Walk(branching_flow(), {"x": 1})
    for node, outputs in [("load", {"data": 1}), ("clean", {"cleaned": 1}), ("stats", {"summary": 2}),
                          ("fit", {"model": 3}), ("report", {"text": "t"})]:
        assert walk.drained is False
        run_node(walk, node, outputs)
    assert walk.drained is True
    assert set(walk.state.values()) == {NodeState.DONE}


def test_result_uses_declared_outputs():
    walk = Walk(branching_flow(outputs=["model", "summary"]), {"x": 1})
    for node, outputs in [("load", {"data": 1}), ("clean", {"cleaned": 2}), ("stats", {"summary": 3}),
                          ("fit", {"model": 4})]:
        run_node(walk, node, outputs)
    assert walk.result() == {"model": 4, "summary": 3}


def test_result_without_outputs_is_every_message_produced():
    walk = Walk(branching_flow(), {"x": 1})
    run_node(walk, "load", {"data": 1})
    run_node(walk, "stats", {"summary": 3})
    walk.fail("clean")
    assert walk.result() == {"data": 1, "summary": 3}


def test_result_omits_declared_outputs_that_were_never_produced():
    walk = Walk(branching_flow(outputs=["model", "data"]), {"x": 1})
    run_node(walk, "load", {"data": 1})
    walk.fail("clean")
    assert walk.result() == {"data": 1}


def test_result_may_include_an_input_declared_as_output():
    flow = Flow("f", inputs={"x": int}, outputs=["x", "y"])
    flow.node(lambda x: x, name="a", provides="y")
    walk = Walk(flow, {"x": 5})
    run_node(walk, "a", {"y": 6})
    assert walk.result() == {"x": 5, "y": 6}


def test_complete_records_every_message_of_the_node():
    flow = Flow("f", inputs={"x": int})
    flow.node(lambda x, emit: x, name="fit", provides=["model", "acc"], streams=["loss"])
    walk = Walk(flow, {"x": 1})
    run_node(walk, "fit", {"model": "m", "acc": 0.9})
    assert walk.messages["model"] == "m"
    assert walk.messages["acc"] == 0.9
    assert walk.state["fit"] is NodeState.DONE


def test_take_fresh_hands_out_each_newly_ready_node_once_and_retry_makes_it_ready_again():
    walk = Walk(independent_flow(), {"x": 1})
    assert walk.take_fresh() == ["a", "b"] and walk.take_fresh() == []
    walk.start("a")
    walk.complete("a", {m: 1 for m in walk.flow.nodes["a"].messages})
    assert walk.take_fresh() == ["after_a"]
    walk.start("b")
    walk.retry("b")
    assert walk.take_fresh() == ["b"] and walk.state["b"] is NodeState.PENDING


def test_a_wide_graph_costs_linear_time_to_walk():
    from fluksio import Flow

    flow = Flow("wide")
    for i in range(5_000):
        flow.node(lambda: 1, name=f"n{i}", provides=f"m{i}", requires=[])
    walk = Walk(flow, {})
    fresh = walk.take_fresh()
    assert len(fresh) == 5_000
    for node in fresh:  # quadratic bookkeeping would take minutes here
        walk.start(node)
        walk.complete(node, {f"m{node[1:]}": 1})
    assert walk.drained and len(walk.result()) == 5_000
