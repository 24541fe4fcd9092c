"""The walk of graphs that take their shape at run time: mapped nodes (map=) and conditions (when=, unless=)."""

from __future__ import annotations

import pytest

from fluksio import Flow, FlowError
from fluksio.driver.restore import restore_earlier
from fluksio.driver.walk import NodeState, Walk
from fluksio.schemas import NodeStatus, split_unit, unit_of
from fluksio.store.rows import NodeRow


def mapped_flow(max_parallel: int | None = None) -> Flow:
    flow = Flow("mapped", inputs={"n": int, "vocab": (dict, {})}, outputs=["counts", "total"])
    flow.node(lambda n: list(range(n)), name="split", provides="shards")
    flow.node(lambda shard, vocab: shard, name="count", provides="counts", map={"shard": "shards"},
              max_parallel=max_parallel)
    flow.node(lambda counts: sum(counts), name="add", provides="total")
    return flow


def finish(walk: Walk, unit: str, outputs: dict) -> None:
    walk.start(unit)
    walk.complete(unit, outputs)


def test_units_name_nodes_and_elements():
    assert unit_of("count", None) == "count" and unit_of("count", 3) == "count[3]"
    assert split_unit("count[3]") == ("count", 3) and split_unit("count") == ("count", None)


def test_a_mapped_node_is_one_unit_per_element_with_the_broadcast_inputs_and_its_own_value():
    walk = Walk(mapped_flow(), {"n": 3, "vocab": {"a": 1}})
    finish(walk, "split", {"shards": ["x", "y", "z"]})
    assert walk.take_fresh() == ["count[0]", "count[1]", "count[2]"]
    assert walk.inputs_of("count[1]") == {"shards": "y", "vocab": {"a": 1}}
    assert walk.elements("count") == 3 and walk.state["count"] is NodeState.RUNNING


def test_the_node_provides_lists_in_element_order_once_the_last_element_ends():
    walk = Walk(mapped_flow(), {"n": 3, "vocab": {}})
    finish(walk, "split", {"shards": ["x", "y", "z"]})
    walk.take_fresh()
    for index in (2, 0):  # out of order
        finish(walk, f"count[{index}]", {"counts": index * 10})
    assert "counts" not in walk.messages and walk.ready() == ["count[1]"]
    finish(walk, "count[1]", {"counts": 10})
    assert walk.messages["counts"] == [0, 10, 20]
    assert walk.state["count"] is NodeState.DONE and walk.take_fresh() == ["add"]


def test_several_map_entries_map_over_the_product_first_entry_varying_slowest():
    flow = Flow("grid", inputs={"lrs": list[float], "depths": list[int]})
    flow.node(lambda lr, depth: lr * depth, name="train", provides="scores", map={"lr": "lrs", "depth": "depths"})
    walk = Walk(flow, {"lrs": [0.1, 0.2], "depths": [1, 2, 3]})
    units = walk.take_fresh()
    assert len(units) == 6
    assert [walk.inputs_of(u) for u in units[:4]] == [{"lrs": 0.1, "depths": 1}, {"lrs": 0.1, "depths": 2},
                                                     {"lrs": 0.1, "depths": 3}, {"lrs": 0.2, "depths": 1}]


def test_an_empty_list_makes_no_unit_one_ok_row_and_empty_lists_downstream():
    walk = Walk(mapped_flow(), {"n": 0, "vocab": {}})
    finish(walk, "split", {"shards": []})
    assert walk.take_fresh() == ["add"]
    assert walk.messages["counts"] == [] and walk.state["count"] is NodeState.DONE
    [ended] = walk.take_ended()
    assert (ended.node, ended.status, ended.outputs) == ("count", NodeStatus.OK, {"counts": []})
    assert "mapped over no elements ('shards' is empty)" in ended.reason


def test_a_mapped_message_that_is_not_a_list_fails_the_node_naming_its_type():
    walk = Walk(mapped_flow(), {"n": 1, "vocab": {}})
    finish(walk, "split", {"shards": {"not": "a list"}})
    assert walk.take_fresh() == []
    assert walk.state["count"] is NodeState.FAILED and walk.state["add"] is NodeState.SKIPPED
    ended = {e.node: e for e in walk.take_ended()}
    assert ended["count"].status is NodeStatus.ERROR
    assert "maps 'shard' over 'shards', which is a dict, not a list" in ended["count"].reason
    assert walk.drained


def test_a_list_longer_than_max_elements_fails_the_node_naming_the_setting():
    walk = Walk(mapped_flow(), {"n": 5, "vocab": {}}, max_elements=4)
    finish(walk, "split", {"shards": [1, 2, 3, 4, 5]})
    assert walk.state["count"] is NodeState.FAILED
    assert "more than max_elements (4)" in walk.errors["count"] and "FLUKSIO_MAX_ELEMENTS" in walk.errors["count"]


def test_a_failed_element_lets_the_others_run_to_the_end_then_fails_the_node_and_skips_downstream():
    walk = Walk(mapped_flow(), {"n": 4, "vocab": {}})
    finish(walk, "split", {"shards": [0, 1, 2, 3]})
    walk.take_fresh()
    for unit in ("count[0]", "count[1]", "count[2]", "count[3]"):
        walk.start(unit)
    assert walk.fail("count[1]", "ValueError: bad shard") == []  # the node is not decided yet
    walk.complete("count[0]", {"counts": 0})
    assert walk.fail("count[3]", "ValueError: worse") == []
    assert walk.state["count"] is NodeState.RUNNING and walk.running() == ["count[2]"]
    walk.complete("count[2]", {"counts": 2})  # the last one ends well: the node fails
    assert walk.state["count"] is NodeState.FAILED and walk.state["add"] is NodeState.SKIPPED
    assert walk.failed() == ["count"] and walk.failed_elements("count") == ["count[1]", "count[3]"]
    assert walk.errors["count[1]"] == "ValueError: bad shard" and walk.drained


def test_max_parallel_releases_elements_as_others_end():
    walk = Walk(mapped_flow(max_parallel=2), {"n": 5, "vocab": {}})
    finish(walk, "split", {"shards": [0, 1, 2, 3, 4]})
    assert walk.take_fresh() == ["count[0]", "count[1]"]
    walk.start("count[0]")
    walk.start("count[1]")
    walk.retry("count[1]")  # a retry keeps its place: nothing more is released
    assert walk.take_fresh() == ["count[1]"]
    finish(walk, "count[0]", {"counts": 0})
    assert walk.take_fresh() == ["count[2]"]
    walk.fail("count[1]", "boom")
    assert walk.take_fresh() == ["count[3]"]


def test_a_map_over_a_mapped_nodes_output_starts_once_the_whole_list_exists():
    flow = Flow("twice", inputs={"xs": list[int]}, outputs=["cubes"])
    flow.node(lambda x: x * x, name="square", provides="squares", map={"x": "xs"})
    flow.node(lambda y: y * y * y, name="cube", provides="cubes", map={"y": "squares"})
    walk = Walk(flow, {"xs": [1, 2]})
    finish(walk, "square[0]", {"squares": 1})
    assert walk.take_fresh() == ["square[1]"]
    finish(walk, "square[1]", {"squares": 4})
    assert walk.take_fresh() == ["cube[0]", "cube[1]"] and walk.inputs_of("cube[1]") == {"squares": 4}


# -- conditions --------------------------------------------------------------------------------------


def conditional_flow() -> Flow:
    flow = Flow("release", inputs={"accuracy": float, "best_so_far": float}, outputs=["summary", "release"])
    flow.node(lambda accuracy, best_so_far: accuracy > best_so_far, name="compare", provides="better")
    flow.node(lambda accuracy: f"v{accuracy}", name="publish", provides="release", when="better")
    flow.node(lambda accuracy: "not better", name="explain", provides="note", unless="better")

    def summarize(release: str | None = None, note: str | None = None) -> str:
        return release or note or ""

    flow.node(summarize, provides="summary")
    flow.node(lambda release: release, name="announce", provides="announcement")  # no default: skipped too
    return flow


def test_when_runs_a_node_only_on_a_truthy_message_and_unless_only_on_a_falsy_one():
    walk = Walk(conditional_flow(), {"accuracy": 0.9, "best_so_far": 0.8})
    finish(walk, "compare", {"better": True})
    assert walk.take_fresh() == ["publish"]
    assert walk.state["explain"] is NodeState.SKIPPED and walk.skip_reasons["explain"] == "skipped: 'better' was true"
    assert walk.inputs_of("publish") == {"accuracy": 0.9}  # the condition is needed, not passed


def test_a_skip_propagates_except_to_parameters_with_a_default_which_get_the_default():
    walk = Walk(conditional_flow(), {"accuracy": 0.5, "best_so_far": 0.8})
    finish(walk, "compare", {"better": False})
    assert walk.skip_reasons["publish"] == "skipped: 'better' was false"
    assert walk.state["announce"] is NodeState.SKIPPED  # needs 'release' without a default
    assert "'release' was not made" in walk.skip_reasons["announce"]
    assert walk.take_fresh() == ["explain"]
    finish(walk, "explain", {"note": "not better"})
    assert walk.take_fresh() == ["summarize"]
    assert walk.inputs_of("summarize") == {"note": "not better"}  # 'release' is left to its default
    finish(walk, "summarize", {"summary": "not better"})
    assert walk.drained and walk.failed() == [] and not walk.failure_skipped
    assert walk.result() == {"summary": "not better", "release": None}  # a skipped output is None


def test_a_skipped_condition_message_skips_the_node():
    flow = Flow("chained", inputs={"go": bool})
    flow.node(lambda: True, name="first", provides="ok", requires=[], when="go")
    flow.node(lambda: 1, name="second", provides="y", requires=[], when="ok")
    walk = Walk(flow, {"go": False})
    assert walk.state["first"] is NodeState.SKIPPED and walk.state["second"] is NodeState.SKIPPED
    assert walk.drained


def test_when_and_map_combine_the_condition_decided_once_for_the_node():
    flow = Flow("both", inputs={"xs": list[int], "go": bool})
    flow.node(lambda x: x, name="each", provides="ys", map={"x": "xs"}, when="go")
    assert Walk(flow, {"xs": [1, 2], "go": True}).take_fresh() == ["each[0]", "each[1]"]
    stopped = Walk(flow, {"xs": [1, 2], "go": False})
    assert stopped.take_fresh() == [] and stopped.state["each"] is NodeState.SKIPPED


def test_a_failure_still_skips_downstream_even_where_a_parameter_has_a_default():
    flow = Flow("strict")
    flow.node(lambda: 1, name="a", provides="x", requires=[])

    def b(x: int = 0) -> int:
        return x

    flow.node(b, provides="y")
    walk = Walk(flow, {})
    walk.start("a")
    assert walk.fail("a", "boom") == ["b"]
    assert walk.failure_skipped == {"b"}


# -- resuming a partly failed map ------------------------------------------------------------------


def test_a_resumed_map_restores_the_elements_that_succeeded_and_runs_the_failed_one_again():
    flow = mapped_flow()
    rows = [NodeRow(run_id="r", node="split", status="ok", outputs={"shards": [0, 1, 2]}),
            NodeRow(run_id="r", node="count", element=0, status="ok", outputs={"counts": 0}),
            NodeRow(run_id="r", node="count", element=1, status="error"),
            NodeRow(run_id="r", node="count", element=2, status="ok", outputs={"counts": 2}),
            NodeRow(run_id="r", node="add", status="skipped")]
    walk = Walk(flow, {"n": 3, "vocab": {}})
    attempts = restore_earlier(walk, rows)
    assert walk.take_fresh() == ["count[1]"]
    assert attempts == {"count[1]": 2, "add": 2}  # they go on counting; add's skip row is not reused
    finish(walk, "count[1]", {"counts": 1})
    assert walk.messages["counts"] == [0, 1, 2] and walk.take_fresh() == ["add"]


# -- declarations ------------------------------------------------------------------------------------


def test_a_map_key_that_is_not_a_parameter_is_refused():
    flow = Flow("bad")
    with pytest.raises(FlowError, match=r"map key 'shards' is not a parameter of the node \(its parameters: shard\)"):
        flow.node(lambda shard: shard, name="count", provides="c", map={"shards": "shards"})


def test_a_mapped_message_also_passed_whole_under_the_same_name_is_refused():
    flow = Flow("bad", inputs={"shards": list[int]})
    with pytest.raises(FlowError, match="maps over 'shards' and also takes it whole"):
        flow.node(lambda shard, shards: shard, name="count", provides="c", map={"shard": "shards"})


def test_a_when_message_nobody_provides_is_refused_when_the_flow_is_validated():
    flow = Flow("bad", inputs={"x": int})
    flow.node(lambda x: x, name="publish", provides="y", when="better")
    with pytest.raises(FlowError, match=r"nobody provides 'better' \(the condition of 'publish'\)"):
        flow.validate()


def test_max_parallel_needs_a_map_and_a_positive_count():
    flow = Flow("bad", inputs={"xs": list[int]})
    with pytest.raises(FlowError, match="has no map="):
        flow.node(lambda xs: xs, name="a", provides="b", max_parallel=2)
    with pytest.raises(FlowError, match="max_parallel must be a whole number"):
        flow.node(lambda x: x, name="c", provides="d", map={"x": "xs"}, max_parallel=0)


def test_a_misspelt_node_option_names_the_options_there_are():
    flow = Flow("typo")
    with pytest.raises(FlowError,
                       match=r"unknown option\(s\) 'retry' \(did you mean 'retry_on' or 'retries'\?\); the options"):
        flow.node(lambda: 1, name="a", provides="b", requires=[], retry=3)


def test_a_wide_map_costs_linear_time_to_walk():
    flow = Flow("wide", inputs={"xs": list[int]})
    flow.node(lambda x: x, name="each", provides="ys", map={"x": "xs"})
    walk = Walk(flow, {"xs": list(range(20_000))})
    units = walk.take_fresh()
    for unit in units:  # quadratic bookkeeping would take minutes here
        walk.start(unit)
        walk.complete(unit, {"ys": 1})
    assert walk.drained and len(walk.messages["ys"]) == 20_000
