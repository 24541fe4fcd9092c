"""A flow described as JSON and rebuilt from it: everything a driver reads survives, no code is imported,
and a manifest that no flow could have produced is refused saying what is wrong with it."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from fluksio import Artifact, Flow, Message, Secret
from fluksio.cache.keys import cache_key
from fluksio.errors import FlowError, RunRejected
from fluksio.flows.manifest import (
    MANIFEST_FORMAT,
    DescribedType,
    ManifestError,
    NodeEntry,
    class_name,
    describe,
    manifest_bytes,
    rebuild,
)
from fluksio.flows.node import NodeSpec
from fluksio.flows.registry import load_flows
from fluksio.runs.submit import validate_params

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
PACKAGE = "sha256:" + "ab" * 32
#: What the driver never reads: the function, and what the worker validates its arguments with.
NOT_CARRIED = {"fn", "types", "adapters", "subflow"}


class Cfg(BaseModel):
    depth: int = 2


class Blob:
    """A class with no JSON form (like a codec's type)."""


def rich() -> Flow:
    """Every option a node takes, and subflows: mapped, renamed, with constants, one run twice and nested."""
    leaf = Flow("leaf", inputs={"x": float, "scale": (float, 1.0)}, outputs=["y"])
    leaf.node(lambda x, scale: x * scale, name="mul", provides="y")
    inner = Flow("inner", inputs={"v": float, "mode": (str, "fast"), "cfg": (Cfg, Cfg())}, outputs=["out"])
    inner.node(lambda cfg, mode: cfg.depth, name="depth", provides="levels")
    inner.subflow(leaf, name="first", params={"x": Message("v")}, provides={"y": "a"})
    inner.subflow(leaf, name="second", params={"x": Message("a"), "scale": 2.0}, provides={"y": "out"})

    main = Flow("main", inputs={"n": (int, 3), "threshold": (float, 0.5), "token": (Secret, "HF_TOKEN"),
                                "blob": Artifact, "raw": (Blob, None), "settings": (Cfg, Cfg(depth=4)),
                                "weights": (list[float], [0.5, 0.25])},
                outputs=["published", "refined", "direct_y"], include=["configs/*.yaml"])

    @main.node(provides="shards", streams=["progress"])
    def split(n: int, token: Secret, emit) -> list[float]:
        return [float(i) for i in range(n)]

    @main.node(provides="scores", map={"shard": "shards"}, max_parallel=2, device="gpu", device_policy="prefer",
               resources={"gpus": 1, "ram_mb": 2048, "cpus": 2}, pool="licenses", retries=3, retry_backoff_s=1.5,
               retry_backoff_max_s=30, retry_on=(TimeoutError, "requests.ConnectionError"), escalate_ram=2.0,
               timeout_s=60, cache=False)
    def train(shard: float, blob, threshold: float = 0.5) -> float:
        return shard

    @main.node(provides="good")
    def judge(scores: list[float], threshold) -> bool:
        return max(scores) > threshold

    @main.node(provides="note", unless="good")
    def explain(scores):
        return "too low"

    @main.node(provides="published", when="good", requires=["scores", "note"])
    def publish(values, note: str = "") -> str:
        return note

    main.subflow(inner, name="refine", map={"v": "scores"}, params={"cfg": Message("settings"), "mode": "slow"},
                 provides={"out": "refined"}, max_parallel=4)
    main.subflow(leaf, name="direct", params={"x": 1.0}, provides={"y": "direct_y"})
    return main.validate()


def every_flow(flow: Flow) -> dict[str, Flow]:
    return {each.name: each for each in (flow, *flow.subflows())}


def carried(spec: NodeSpec) -> dict[str, Any]:
    """The fields of a node a driver reads, with its subflow as the names and JSON it is described by."""
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name not in NOT_CARRIED}
    if spec.subflow is not None:
        fields["subflow"] = (spec.subflow.flow.name, spec.subflow.outputs,
                             json.loads(json.dumps(spec.subflow.constants)))
    return fields


# -- what survives ---------------------------------------------------------------------------------------


def test_the_manifest_format_carries_every_nodespec_field_but_the_function_and_its_validators():
    # A field added to NodeSpec and forgotten here would be lost on the way to a driver that never imports it.
    # `code` is no field of a NodeSpec: the node's code identity, read from its function's files.
    assert {f.name for f in dataclasses.fields(NodeSpec)} - {"fn", "adapters"} == set(NodeEntry.model_fields) - {"code"}


def test_a_rebuilt_flow_has_every_field_the_driver_reads():
    original = rich()
    rebuilt = rebuild(describe(original), code_digest=PACKAGE)
    originals, rebuilts = every_flow(original), every_flow(rebuilt)
    assert set(originals) == set(rebuilts) == {"main", "inner", "leaf"}
    for name, flow in originals.items():
        again = rebuilts[name]
        assert list(again.nodes) == list(flow.nodes)
        for node_name, spec in flow.nodes.items():
            assert carried(again.nodes[node_name]) == carried(spec), node_name
            assert again.nodes[node_name].types == {} and again.nodes[node_name].adapters == {}
        assert again.version == flow.version
        assert again.order == flow.order and again.providers == flow.providers
        assert again.outputs == flow.outputs and again.include == flow.include
        assert again.result_messages == flow.result_messages
        assert list(again.inputs) == list(flow.inputs)
        assert {n: i.default for n, i in again.inputs.items() if not i.required} == {
            n: to_jsonable_python(i.default) for n, i in flow.inputs.items() if not i.required}
        assert [n for n, i in again.inputs.items() if i.required] == [n for n, i in flow.inputs.items() if i.required]
        assert again.source_digest == PACKAGE and again.source_file is None


def test_a_rebuilt_node_has_the_same_cache_key():
    original = rich()
    rebuilt = rebuild(describe(original), code_digest=PACKAGE)
    for name, flow in every_flow(original).items():
        for node_name, spec in flow.nodes.items():
            inputs = {message: [1, "a"] for message in spec.requires}
            again = every_flow(rebuilt)[name].nodes[node_name]
            assert cache_key(name, again, "sha256:x", inputs) == cache_key(name, spec, "sha256:x", inputs)


def test_a_subflow_run_twice_or_nested_is_described_once_and_rebuilt_as_one_flow():
    described = describe(rich())
    assert sorted(described["flows"]) == ["inner", "leaf", "main"]
    rebuilt = rebuild(described, code_digest=PACKAGE)
    inner = rebuilt.nodes["refine"].subflow.flow
    assert inner.nodes["first"].subflow.flow is inner.nodes["second"].subflow.flow
    assert inner.nodes["first"].subflow.flow is rebuilt.nodes["direct"].subflow.flow
    assert rebuilt.nodes["refine"].subflow.constants == (("mode", "slow"),)


def test_the_same_flow_gives_the_same_bytes_and_so_does_its_rebuilt_flow():
    first = manifest_bytes(rich())
    assert manifest_bytes(rich()) == first
    rebuilt = rebuild(json.loads(first), code_digest=PACKAGE)
    assert manifest_bytes(rebuilt) == first
    assert manifest_bytes(rebuild(first, code_digest=None)) == first  # bytes are read too
    assert json.loads(first)["format"] == MANIFEST_FORMAT


def test_rebuilding_from_a_manifest_carrying_tuples_is_the_same_as_from_its_json():
    original = rich()
    described = describe(original)
    described["flows"]["main"]["outputs"] = tuple(described["flows"]["main"]["outputs"])
    assert manifest_bytes(rebuild(described, code_digest=PACKAGE)) == manifest_bytes(original)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_each_example_flow_survives_the_round_trip(path: Path):
    for flow in load_flows(str(path)):
        data = manifest_bytes(flow)
        rebuilt = rebuild(json.loads(data), code_digest=PACKAGE)
        assert manifest_bytes(rebuilt) == data
        assert rebuilt.version == flow.version and rebuilt.order == flow.order
        for name, each in every_flow(flow).items():
            for node_name, spec in each.nodes.items():
                assert carried(every_flow(rebuilt)[name].nodes[node_name]) == carried(spec)


def test_another_process_describes_the_examples_to_the_same_bytes():
    script = textwrap.dedent("""
        import hashlib, json, sys
        from fluksio.flows.manifest import manifest_bytes
        from fluksio.flows.registry import load_flows
        print(json.dumps({f.name: hashlib.sha256(manifest_bytes(f)).hexdigest()
                          for path in sys.argv[1:] for f in load_flows(path)}))
    """)
    here = {f.name: hashlib.sha256(manifest_bytes(f)).hexdigest() for p in EXAMPLES for f in load_flows(str(p))}
    done = subprocess.run([sys.executable, "-c", script, *map(str, EXAMPLES)], cwd=ROOT, capture_output=True,
                          text=True, check=True, env={"PYTHONHASHSEED": "123", "PATH": ""})
    assert json.loads(done.stdout) == here


# -- inputs ----------------------------------------------------------------------------------------------


def test_inputs_are_described_by_kind_with_their_defaults_as_json():
    inputs = {i["name"]: i for i in describe(rich())["flows"]["main"]["inputs"]}
    assert inputs["token"] | {} == {"name": "token", "type": "fluksio.flows.secret.Secret", "kind": "secret",
                                    "class_name": "fluksio.flows.secret:Secret", "json_schema": None,
                                    "default": "HF_TOKEN"}
    assert inputs["blob"]["kind"] == "artifact" and "default" not in inputs["blob"]
    assert inputs["raw"]["kind"] == "class" and inputs["raw"]["class_name"] == class_name(Blob)
    assert inputs["raw"]["default"] is None
    assert inputs["settings"]["kind"] == "json" and inputs["settings"]["default"] == {"depth": 4}
    assert inputs["settings"]["json_schema"]["properties"] == {"depth": {"default": 2, "title": "Depth",
                                                                         "type": "integer"}}
    assert inputs["weights"]["type"] == "list[float]" and inputs["weights"]["class_name"] is None


def test_rebuilt_secret_and_artifact_inputs_are_checked_at_submit_as_the_originals_are():
    original = rich()
    rebuilt = rebuild(describe(original), code_digest=PACKAGE, known_types={class_name(Artifact): Artifact})
    assert rebuilt.inputs["token"].type is Secret and rebuilt.inputs["blob"].type is Artifact
    digest = "sha256:" + "0" * 64
    given = {"blob": digest, "token": "API_KEY", "settings": {"depth": 1}, "weights": [1.0]}
    assert validate_params(rebuilt, given, seed=None) == validate_params(original, given, seed=None)
    for wrong in ({"blob": "not a digest"}, {"blob": digest, "token": "a value, not a name"}):
        with pytest.raises(RunRejected) as refused:
            validate_params(original, wrong, seed=None)
        with pytest.raises(RunRejected, match=str(refused.value)[:40].replace("(", r"\(")):
            validate_params(rebuilt, wrong, seed=None)


def test_an_input_of_a_type_this_package_cannot_import_takes_any_value_and_keeps_its_name():
    rebuilt = rebuild(describe(rich()), code_digest=PACKAGE)
    blob, settings = rebuilt.inputs["blob"], rebuilt.inputs["settings"]
    assert issubclass(blob.type, DescribedType) and blob.type_name == "fluksio.artifacts.artifact.Artifact"
    assert settings.type_name == f"{Cfg.__module__}.Cfg" and settings.default == {"depth": 4}
    # Checked against the real type when the parent run was submitted; a child run gets what nodes made.
    assert validate_params(rebuilt, {"blob": {"any": "thing"}}, seed=None)["blob"] == {"any": "thing"}
    assert rebuild(describe(rich()), code_digest=PACKAGE).inputs["blob"].type is blob.type  # one class each


def test_a_default_that_is_not_json_cannot_be_described():
    flow = Flow("f", inputs={"x": (float, math.nan)})
    flow.node(lambda x: x, name="copy", provides="y")
    with pytest.raises(ManifestError, match=r"the default of input 'x' of flow 'f' \(nan\) cannot be described"):
        describe(flow)


def test_two_different_flows_of_one_name_cannot_be_described_together():
    one, other = Flow("child", inputs={"x": int}), Flow("child", inputs={"x": int})
    one.node(lambda x: x, name="a", provides="y")
    other.node(lambda x: x, name="b", provides="y")
    parent = Flow("parent", inputs={"x": int})
    parent.subflow(one, name="first", provides={"y": "y1"})
    parent.subflow(other, name="second", provides={"y": "y2"})
    with pytest.raises(ManifestError, match=r"runs two different flows named 'child'"):
        describe(parent)


# -- no code ---------------------------------------------------------------------------------------------


def test_calling_a_rebuilt_node_says_where_its_code_is():
    rebuilt = rebuild(describe(rich()), code_digest=PACKAGE)
    for spec in (rebuilt.nodes["train"], rebuilt.nodes["refine"]):
        with pytest.raises(FlowError, match=rf"node '{spec.name}' of flow 'main' was rebuilt from its description "
                                            rf"and cannot be called here; its code is in package {PACKAGE}"):
            spec.fn(1.0)


def test_rebuilding_imports_none_of_the_flows_code(tmp_path: Path):
    (tmp_path / "shipped.py").write_text(textwrap.dedent("""
        from pydantic import BaseModel
        from fluksio import Flow

        class Cfg(BaseModel):
            depth: int = 2

        class Blob:
            pass

        flow = Flow("shipped", inputs={"cfg": (Cfg, Cfg()), "blob": Blob}, outputs=["y"])

        @flow.node(provides="y")
        def step(cfg: Cfg, blob: Blob) -> int:
            return cfg.depth
    """))
    [flow] = load_flows(str(tmp_path / "shipped.py"))
    data = manifest_bytes(flow)
    assert b"shipped:Cfg" in data and b"fluksio_flowfile" not in data  # named by file, not by where it is
    (tmp_path / "graph.json").write_bytes(data)
    script = textwrap.dedent("""
        import json, sys
        from fluksio.flows.manifest import rebuild
        flow = rebuild(open(sys.argv[1], "rb").read(), code_digest="sha256:" + "1" * 64)
        print(json.dumps({"modules": [m for m in sys.modules if "shipped" in m],
                          "types": [i.type_name for i in flow.inputs.values()], "nodes": list(flow.nodes)}))
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "graph.json")], cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"modules": [], "types": ["shipped.Cfg", "shipped.Blob"], "nodes": ["step"]}


# -- what is refused -------------------------------------------------------------------------------------


def node(data: dict[str, Any], flow: str, name: str) -> dict[str, Any]:
    return next(n for n in data["flows"][flow]["nodes"] if n["name"] == name)


def change(key: str, value: Any, flow: str = "main", name: str = "train") -> Callable[[dict[str, Any]], None]:
    return lambda data: node(data, flow, name).__setitem__(key, value)


MALFORMED: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("bad format", lambda d: d.update(format=2),
     r"^manifest format 2 is not one this fluksio reads \(it reads format 1\)"),
    ("no format", lambda d: d.pop("format"), r"^manifest format None is not one this fluksio reads"),
    ("missing node key", lambda d: node(d, "main", "split").pop("retries"),
     r"^manifest of flow 'main': flow 'main', node 'split': missing key 'retries'$"),
    ("unknown node key", change("retriez", 1),
     r"^manifest of flow 'main': flow 'main', node 'train': unknown key 'retriez'$"),
    ("wrong type", change("cache", "no"),
     r"flow 'main', node 'train': cache: Input should be a valid boolean \(got \"no\"\)$"),
    ("integer as a bool", change("retries", True), r"node 'train': retries: Input should be a valid integer"),
    ("unknown device_policy", change("device_policy", "maybe"),
     r"node 'train' of flow 'main': device_policy must be 'require' or 'prefer', got 'maybe'"),
    ("negative retries", change("retries", -1),
     r"node 'train' of flow 'main': retries must be a whole number ≥ 0, got -1"),
    ("backoff without retries", change("retries", 0), r"apply to retries, but the node has retries=0"),
    ("unknown resource", change("resources", {"cpus": 1, "tpus": 2}),
     r"flow 'main', node 'train': unknown key 'resources.tpus'$"),
    ("a negative resource", change("resources", {"cpus": 1, "gpus": -1}),
     r"node 'train': resources.gpus: Input should be greater than or equal to 0 \(got -1\)$"),
    ("no cpu", change("resources", {"cpus": 0}), r"resources must ask for at least 1 cpu, got 0"),
    ("subflow naming an absent flow", lambda d: node(d, "main", "refine")["subflow"].update(flow="nowhere"),
     r"^manifest of flow 'main': flow 'main' runs flow 'nowhere' as a subflow, but the manifest describes no flow "
     r"of that name \(it describes: inner, leaf, main\)$"),
    ("subflow running its parent", lambda d: node(d, "inner", "first")["subflow"].update(flow="main"),
     r"flow 'main' contains itself: main -> inner -> main$"),
    ("a cycle", change("when", "good", name="split"), r"flow 'main' has a cycle: "),
    ("no such main flow", lambda d: d.update(flow="other"),
     r"it is of flow 'other', but the manifest describes no flow of that name"),
    ("a flow it never runs", lambda d: d["flows"].update(extra=d["flows"]["leaf"]),
     r"^manifest of flow 'main' describes 'extra', which it never runs"),
    ("fields that disagree", change("cache", True, name="direct"),
     r"node 'direct' of flow 'main': its cache is True, but a node declared with its other fields has False"),
    ("defaults that disagree", change("optional", [], name="direct"),
     r"node 'direct' of flow 'main': its optional is \[\], but a node declared with its other fields has "
     r"\['scale'\]"),
    ("a param twice", lambda d: node(d, "main", "explain").update(params=["scores"] * 2, requires=["scores"] * 2),
     r"node 'explain' of flow 'main': its params \['scores', 'scores'\] cannot be a function's parameters"),
    ("two nodes of one name", lambda d: d["flows"]["main"]["nodes"].append(node(d, "main", "judge")),
     r"flow 'main' has two nodes named 'judge'"),
    ("types of no param", change("types", {"nothing": "int"}), r"types names 'nothing', which are not among its"),
    ("a bad include", lambda d: d["flows"]["main"].update(include=["../secrets"]), r"is not a glob relative"),
    ("a bad input kind", lambda d: d["flows"]["main"]["inputs"][0].update(kind="pickle"),
     r"flow 'main', input 'n': kind: Input should be 'secret', 'artifact', 'class' or 'json'"),
]


@pytest.mark.parametrize(("mangle", "message"), [(m, e) for _, m, e in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_a_malformed_manifest_is_refused_saying_what_is_wrong(mangle: Callable[[dict[str, Any]], Any],
                                                             message: str):
    data = copy.deepcopy(describe(rich()))
    mangle(data)
    with pytest.raises(ManifestError, match=message) as refused:
        rebuild(data, code_digest=PACKAGE)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("data", "message"), [
    ([1], r"^a manifest is a JSON object, got list$"),
    (b"{", r"^a manifest is JSON, and this is not"),
    ({"format": 1, "flow": "f", "flows": {}, "x": math.inf}, r"^a manifest holds JSON values only"),
    ({"format": 1}, r"^manifest: missing key 'flow'; missing key 'flows'$"),
])
def test_what_is_no_manifest_at_all_is_refused(data: Any, message: str):
    with pytest.raises(ManifestError, match=message):
        rebuild(data, code_digest=None)
