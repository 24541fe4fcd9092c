"""Flow and node declarations: what a node requires/provides, the checks made when it is declared."""

from __future__ import annotations

import pytest

from fluksio.errors import FlowError, FluksioError
from fluksio.flows.flow import Flow
from fluksio.schemas import DevicePolicy, Resources


def two_step_flow(name: str = "f") -> Flow:
    flow = Flow(name, inputs={"x": int}, outputs=["y"])

    @flow.node(provides="a")
    def first(x):
        return x + 1

    @flow.node(provides="y")
    def second(a):
        return a * 2

    return flow


# -- requires / provides -------------------------------------------------------------------------


def test_requires_defaults_to_the_function_parameters_minus_emit():
    flow = Flow("f", inputs={"data": list, "lr": float})

    @flow.node(provides="model", streams=["loss"])
    def fit(data, lr, emit):
        return 1

    spec = flow.nodes["fit"]
    assert spec.requires == ("data", "lr")
    assert spec.takes_emit is True
    assert spec.provides == ("model",)
    assert spec.streams == ("loss",)
    assert spec.messages == ("model", "loss")


def test_emit_may_be_keyword_only_and_is_never_a_requirement():
    flow = Flow("f", inputs={"x": int})

    @flow.node(provides="y", streams="loss")
    def step(x, *, emit):
        return x

    assert flow.nodes["step"].requires == ("x",)
    assert flow.nodes["step"].streams == ("loss",)


def test_explicit_requires_binds_messages_to_parameters_in_order():
    flow = Flow("f", inputs={"raw": int, "rate": float})

    @flow.node(provides="y", requires=["raw", "rate"])
    def scale(value, factor):
        return value * factor

    assert flow.nodes["scale"].requires == ("raw", "rate")
    flow.validate()


def test_requires_given_as_a_single_string():
    flow = Flow("f", inputs={"raw": int})

    @flow.node(provides="y", requires="raw")
    def ident(value):
        return value

    assert flow.nodes["ident"].requires == ("raw",)


def test_provides_may_be_a_string_a_list_or_nothing():
    flow = Flow("f", inputs={"x": int})

    @flow.node(provides="a")
    def one(x): ...

    @flow.node(provides=["b", "c"])
    def two(x): ...

    @flow.node
    def side_effect(x): ...

    assert flow.nodes["one"].provides == ("a",)
    assert flow.nodes["two"].provides == ("b", "c")
    assert flow.nodes["side_effect"].provides == ()


def test_node_decorator_returns_the_function_unchanged():
    flow = Flow("f", inputs={"x": int})

    def double(x):
        return 2 * x

    assert flow.node(provides="y")(double) is double
    assert flow.node(double, name="again", provides="z") is double
    assert double(3) == 6


def test_name_overrides_the_function_name():
    flow = Flow("f", inputs={"x": int})

    @flow.node(name="renamed", provides="y")
    def original(x): ...

    assert list(flow.nodes) == ["renamed"]


def test_node_options_are_recorded():
    flow = Flow("f", inputs={"x": int})

    @flow.node(provides="y", device="gpu", device_policy="prefer", resources={"cpus": 2, "gpus": 1, "ram_mb": 512},
               retries=3, timeout_s=5, cache=False)
    def fit(x): ...

    spec = flow.nodes["fit"]
    assert spec.device == "gpu"
    assert spec.device_policy is DevicePolicy.PREFER
    assert spec.resources == Resources(cpus=2, gpus=1, ram_mb=512)
    assert spec.retries == 3
    assert spec.timeout_s == 5.0 and isinstance(spec.timeout_s, float)
    assert spec.cache is False


def test_node_defaults():
    flow = Flow("f", inputs={"x": int})

    @flow.node(provides="y")
    def plain(x): ...

    spec = flow.nodes["plain"]
    assert spec.device is None
    assert spec.device_policy is DevicePolicy.REQUIRE
    assert spec.resources == Resources(cpus=1, gpus=0, ram_mb=0)
    assert spec.retries == 0 and spec.timeout_s is None and spec.cache is True and spec.takes_emit is False


def test_inputs_accept_a_type_with_default():
    flow = Flow("f", inputs={"lr": float, "epochs": (int, 3)})
    assert flow.inputs["lr"].required is True
    assert flow.inputs["epochs"].required is False
    assert flow.inputs["epochs"].default == 3
    assert flow.inputs["epochs"].type_name == "int"
    assert flow.inputs["lr"].adapter().validate_python("0.5") == 0.5


def test_outputs_given_as_a_string():
    flow = Flow("f", inputs={"x": int}, outputs="x")
    assert flow.outputs == ["x"]


def test_flow_remembers_the_module_that_defined_it():
    flow = Flow("f")
    assert flow.module == __name__
    assert flow.source_file == __file__


# -- declaration errors ----------------------------------------------------------------------------


def test_flow_error_is_a_fluksio_error():
    assert issubclass(FlowError, FluksioError)


@pytest.mark.parametrize("name", ["", "1abc", "has space", "semi;colon", "a/b", None, 3])
def test_bad_flow_names_are_rejected(name):
    with pytest.raises(FlowError, match="flow name"):
        Flow(name)


@pytest.mark.parametrize("name", ["train", "train-v2", "team.train", "_x9"])
def test_plain_flow_names_are_accepted(name):
    assert Flow(name).name == name


@pytest.mark.parametrize("bad", ["1x", "with space", "class", "a-b", ""])
def test_bad_input_names_are_rejected(bad):
    with pytest.raises(FlowError, match=f"input {bad!r}"):
        Flow("f", inputs={bad: int})


def test_input_tuple_must_be_type_and_default():
    with pytest.raises(FlowError, match=r"\(type, default\)"):
        Flow("f", inputs={"x": (int, 1, 2)})


def test_input_with_an_unusable_type_is_rejected():
    class NotAType:  # an instance, not a type pydantic can validate against
        pass

    with pytest.raises(FlowError, match="unusable type"):
        Flow("f", inputs={"x": NotAType()})


@pytest.mark.parametrize("bad", ["bad name", "def", "3d"])
def test_bad_output_names_are_rejected(bad):
    with pytest.raises(FlowError, match=f"output {bad!r}"):
        Flow("f", outputs=[bad])


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"provides": "bad-name"}, "provided message 'bad-name'"),
        ({"provides": ["ok", "for"]}, "provided message 'for'"),
        ({"streams": ["1loss"]}, "streamed message '1loss'"),
        ({"device": "gpu box"}, "device label 'gpu box'"),
        ({"name": "not valid"}, "node name 'not valid'"),
    ],
)
def test_bad_identifiers_in_a_node_are_rejected(kwargs, fragment):
    flow = Flow("f", inputs={"x": int})

    with pytest.raises(FlowError) as info:
        @flow.node(**kwargs)
        def step(x, emit): ...

    assert fragment in str(info.value)
    assert "not a valid name" in str(info.value)


def test_bad_required_message_name_is_rejected():
    flow = Flow("f", inputs={"x": int})
    with pytest.raises(FlowError, match="required message 'x y'"):
        flow.node(lambda a: a, name="step", requires=["x y"])


def test_lambda_without_a_name_is_rejected_for_its_name():
    flow = Flow("f", inputs={"x": int})
    with pytest.raises(FlowError, match="node name '<lambda>'"):
        flow.node(lambda x: x, provides="y")


def test_decorating_something_not_callable_is_rejected():
    flow = Flow("f")
    with pytest.raises(FlowError, match="must decorate a function, got int"):
        flow.node(42)


def test_duplicate_node_names_are_rejected():
    flow = Flow("f", inputs={"x": int})

    @flow.node(provides="a")
    def step(x): ...

    with pytest.raises(FlowError, match="already has a node named 'step'; pass name= to rename"):
        @flow.node(provides="b")
        def step(x): ...  # noqa: F811

    assert list(flow.nodes) == ["step"]
    assert flow.nodes["step"].provides == ("a",)


def test_a_message_declared_twice_by_one_node_is_rejected():
    flow = Flow("f", inputs={"x": int})
    with pytest.raises(FlowError, match="declares 'a' more than once"):
        @flow.node(provides="a", streams=["a"])
        def step(x, emit): ...


def test_streams_without_an_emit_parameter_are_rejected():
    flow = Flow("f", inputs={"x": int})
    with pytest.raises(FlowError, match="streams loss but its function has no 'emit' parameter"):
        @flow.node(provides="y", streams=["loss"])
        def fit(x): ...


def test_requires_count_must_match_the_parameters():
    flow = Flow("f", inputs={"a": int, "b": int})
    with pytest.raises(FlowError) as info:
        @flow.node(provides="y", requires=["a"])
        def add(left, right): ...

    message = str(info.value)
    assert "requires 1 message(s) (a)" in message
    assert "takes 2 parameter(s) (left, right)" in message


def test_requires_count_ignores_emit():
    flow = Flow("f", inputs={"a": int})
    with pytest.raises(FlowError, match=r"requires 2 message\(s\)"):
        @flow.node(provides="y", requires=["a", "emit_too"], streams=["s"])
        def step(value, emit): ...


@pytest.mark.parametrize(
    "fn",
    [
        pytest.param(lambda *args: None, id="var-positional"),
        pytest.param(lambda **kwargs: None, id="var-keyword"),
    ],
)
def test_star_args_and_kwargs_are_rejected(fn):
    flow = Flow("f")
    with pytest.raises(FlowError, match=r"\*args/\*\*kwargs cannot be bound"):
        flow.node(fn, name="step")


def test_keyword_only_parameters_other_than_emit_are_rejected():
    flow = Flow("f", inputs={"x": int})
    with pytest.raises(FlowError, match="keyword-only parameter 'mode'"):
        @flow.node
        def step(x, *, mode): ...


def test_a_builtin_without_a_signature_is_rejected():
    flow = Flow("f")
    with pytest.raises(FlowError, match="cannot read the function's signature"):
        flow.node(max, name="step")  # a builtin inspect cannot read


@pytest.mark.parametrize(
    "resources",
    [{"cpus": 0}, {"gpus": -1}, {"ram_mb": -5}, {"cpu": 2}, "big", 5],
)
def test_bad_resources_are_rejected(resources):
    flow = Flow("f", inputs={"x": int})
    with pytest.raises(FlowError, match=r"node 'step' of flow 'f': (invalid resources|resources must ask)"):
        flow.node(lambda x: x, name="step", resources=resources)
    assert flow.nodes == {}


@pytest.mark.parametrize("retries", [-1, 1.5, True, "2", None])
def test_bad_retries_are_rejected(retries):
    flow = Flow("f", inputs={"x": int})
    with pytest.raises(FlowError, match="retries must be a whole number"):
        flow.node(lambda x: x, name="step", retries=retries)


@pytest.mark.parametrize("timeout_s", [0, -1, True, "10"])
def test_bad_timeouts_are_rejected(timeout_s):
    flow = Flow("f", inputs={"x": int})
    with pytest.raises(FlowError, match="timeout_s must be a positive number"):
        flow.node(lambda x: x, name="step", timeout_s=timeout_s)


def test_bad_device_policy_is_rejected():
    flow = Flow("f", inputs={"x": int})
    with pytest.raises(FlowError, match="device_policy must be 'require' or 'prefer', got 'maybe'"):
        flow.node(lambda x: x, name="step", device_policy="maybe")


def test_error_messages_name_the_node_and_the_flow():
    flow = Flow("train", inputs={"x": int})
    with pytest.raises(FlowError, match="node 'fit' of flow 'train'"):
        flow.node(lambda x: x, name="fit", retries=-1)


# -- derived properties ----------------------------------------------------------------------------


def test_result_messages_are_the_declared_outputs():
    flow = two_step_flow()
    assert flow.result_messages == ["y"]


def test_result_messages_without_outputs_are_every_node_message():
    flow = Flow("f", inputs={"x": int})

    @flow.node(provides=["a", "b"], streams=["loss"])
    def one(x, emit): ...

    @flow.node(provides="c")
    def two(a): ...

    assert flow.result_messages == ["a", "b", "loss", "c"]


def test_result_messages_is_a_copy():
    flow = two_step_flow()
    flow.result_messages.append("z")
    assert flow.outputs == ["y"]


def test_order_is_topological_whatever_the_declaration_order():
    flow = Flow("f", inputs={"x": int})

    @flow.node(provides="d")
    def last(b, c): ...

    @flow.node(provides="c")
    def middle(a): ...

    @flow.node(provides="b")
    def other(a): ...

    @flow.node(provides="a")
    def first(x): ...

    order = flow.order
    assert sorted(order) == ["first", "last", "middle", "other"]
    position = {name: i for i, name in enumerate(order)}
    assert position["first"] < position["middle"] < position["last"]
    assert position["first"] < position["other"] < position["last"]


def test_order_keeps_declaration_order_between_independent_nodes():
    flow = Flow("f", inputs={"x": int})

    @flow.node(provides="b")
    def beta(x): ...

    @flow.node(provides="a")
    def alpha(x): ...

    assert flow.order == ["beta", "alpha"]


def test_providers_maps_messages_to_nodes_or_inputs():
    flow = two_step_flow()
    assert flow.providers == {"x": "<input>", "a": "first", "y": "second"}


def test_version_is_stable_across_identical_graphs():
    assert two_step_flow().version == two_step_flow().version
    assert len(two_step_flow().version) == 16


def test_version_ignores_the_code_inside_nodes():
    def build(offset):
        flow = Flow("f", inputs={"x": int})

        @flow.node(provides="y")
        def step(x):
            return x + offset

        return flow

    assert build(1).version == build(2).version


def test_version_changes_when_ports_change():
    base = two_step_flow().version

    more_outputs = Flow("f", inputs={"x": int}, outputs=["y", "a"])
    more_outputs.node(lambda x: x, name="first", provides="a")
    more_outputs.node(lambda a: a, name="second", provides="y")

    extra_stream = Flow("f", inputs={"x": int}, outputs=["y"])
    extra_stream.node(lambda x, emit: x, name="first", provides="a", streams=["loss"])
    extra_stream.node(lambda a: a, name="second", provides="y")

    extra_input = Flow("f", inputs={"x": int, "z": int}, outputs=["y"])
    extra_input.node(lambda x: x, name="first", provides="a")
    extra_input.node(lambda a: a, name="second", provides="y")

    renamed_node = Flow("f", inputs={"x": int}, outputs=["y"])
    renamed_node.node(lambda x: x, name="start", provides="a")
    renamed_node.node(lambda a: a, name="second", provides="y")

    versions = {base, more_outputs.version, extra_stream.version, extra_input.version, renamed_node.version}
    assert len(versions) == 5


def test_adding_a_node_invalidates_the_cached_providers():
    flow = Flow("f", inputs={"x": int})
    flow.node(lambda x: x, name="first", provides="a")
    assert "b" not in flow.providers
    flow.node(lambda a: a, name="second", provides="b")
    assert flow.providers["b"] == "second"
    assert flow.order == ["first", "second"]


def test_validate_returns_the_flow():
    flow = two_step_flow()
    assert flow.validate() is flow
