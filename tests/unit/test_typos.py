"""A misspelt name gets a "did you mean": inputs, messages (what nodes require, what a flow outputs, what a run
made), node options and flow names; the FLUKSIO_FLOWS setting that names a module Python cannot find says so."""

from __future__ import annotations

import pytest

from fluksio import Flow
from fluksio.errors import FlowError, FlowNotFound, RunRejected
from fluksio.flows.registry import FlowRegistry
from fluksio.runs.submit import validate_params


def train_flow() -> Flow:
    flow = Flow("train", inputs={"lr": float, "epochs": int}, outputs=["accuracy"])

    @flow.node(provides="accuracy")
    def fit(lr: float, epochs: int) -> float:
        return lr * epochs

    return flow


def test_a_misspelt_input_is_suggested() -> None:
    with pytest.raises(RunRejected) as refused:
        validate_params(train_flow(), {"lrr": 0.1, "epochs": 3}, None)
    assert str(refused.value) == ("'lrr' is not an input of flow 'train' (it declares: epochs, lr); "
                                  "did you mean 'lr'?")


def test_an_input_like_none_declared_gets_no_guess() -> None:
    with pytest.raises(RunRejected) as refused:
        validate_params(train_flow(), {"zzz": 1}, None)
    assert "did you mean" not in str(refused.value)


def test_a_misspelt_message_a_node_requires_is_suggested() -> None:
    flow = Flow("f", inputs={"dataset": str})
    flow.node(lambda datset: datset, name="load", provides="rows")
    with pytest.raises(FlowError, match=r"nobody provides 'datset' \(required by 'load', did you mean 'dataset'\?\)"):
        flow.validate()


def test_a_misspelt_output_is_suggested() -> None:
    flow = Flow("f", inputs={"x": int}, outputs=["acuracy"])
    flow.node(lambda x: x, name="score", provides="accuracy")
    with pytest.raises(FlowError) as refused:
        flow.validate()
    assert str(refused.value).endswith("(known messages: accuracy, x); for 'acuracy' did you mean 'accuracy'?")


def test_a_misspelt_condition_is_suggested() -> None:
    flow = Flow("f", inputs={"better": bool})
    flow.node(lambda: 1, name="publish", provides="release", when="beter")
    with pytest.raises(FlowError, match=r"'beter' \(the condition of 'publish', did you mean 'better'\?\)"):
        flow.validate()


def test_a_misspelt_node_option_is_suggested() -> None:
    flow = Flow("f")
    with pytest.raises(FlowError, match=r"unknown option\(s\) 'devise' \(did you mean 'device'\?\)"):
        flow.node(lambda: 1, provides="x", devise="gpu")


def test_a_misspelt_subflow_parameter_is_suggested() -> None:
    parent = Flow("search", inputs={"lr": float})
    with pytest.raises(FlowError, match=r"params names 'epoch', .* \(its inputs: lr, epochs\); did you mean 'epochs'"):
        parent.subflow(train_flow(), name="trial", params={"epoch": 3})


def test_a_misspelt_flow_name_is_suggested() -> None:
    registry = FlowRegistry()
    registry.register(train_flow())
    with pytest.raises(FlowNotFound) as missing:
        registry.resolve("trian")
    assert str(missing.value).startswith("no flow named 'trian' is registered here (registered: train)")
    assert str(missing.value).endswith("; did you mean 'train'?")


def test_a_flows_setting_naming_a_module_python_cannot_find_names_the_setting_and_pythonpath() -> None:
    with pytest.raises(FlowNotFound) as missing:
        FlowRegistry().load_sources(["fluksio_no_such_pkg.flows"])
    message = str(missing.value)
    assert message.startswith("FLUKSIO_FLOWS names 'fluksio_no_such_pkg.flows', but 'fluksio_no_such_pkg' cannot "
                              "be imported here")
    assert "add the folder that holds 'fluksio_no_such_pkg' to PYTHONPATH" in message
    assert "or name the file in FLUKSIO_FLOWS (path/to/flows.py)" in message and "\n" not in message


def test_a_flows_setting_naming_a_missing_file_names_the_setting() -> None:
    with pytest.raises(FlowNotFound, match=r"^FLUKSIO_FLOWS names 'nowhere/flows.py': no flow file nowhere/flows.py$"):
        FlowRegistry().load_sources(["nowhere/flows.py"])
