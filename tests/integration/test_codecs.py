"""Typed values between nodes on the embedded default (SQLite and PostgreSQL): arrays, frames, models,
dataclasses, enums and a user's codec arrive as what was sent; what cannot travel fails naming the value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fluksio import Client, Flow, RunRecord, RunRejected, RunStatus
from fluksio.artifacts import LocalArtifactStore
from fluksio.errors import OutputNotFound
from fluksio.store.run_rows import node_rows
from tests.integration.support import codec_flows as flows

pytestmark = pytest.mark.integration


def type_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def node_of(record: RunRecord, name: str) -> Any:
    return next(n for n in record.nodes if n.node == name)


def test_each_typed_value_crosses_a_node_boundary_as_the_same_type_with_equal_content(client: Client) -> None:
    record = client.submit(flows.typed, {"n": 6}).wait(timeout=60)
    assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    report = record.result["report"]
    assert report["types"] == {"arr": "numpy.ndarray", "frame": type_path(pd.DataFrame),
                               "cfg": type_path(flows.Cfg), "box": type_path(flows.Box),
                               "colour": type_path(flows.Colour), "span": type_path(flows.Interval)}
    assert report["equal"] == dict.fromkeys(report["types"], True)
    # The run's rows say which codec carried each stored value, its size and its digest.
    made = {a.message: a for a in client.artifacts(record.id) if a.node == "make"}
    assert {m: a.codec for m, a in made.items()} == {"arr": "numpy", "frame": "pandas", "span": "interval"}
    for message, artifact in made.items():
        ref = record.result[message]["$artifact"]
        assert (ref["digest"], ref["size"], ref["codec"]) == (artifact.digest, artifact.size, artifact.codec)
        assert client._runtime.artifacts.path(artifact.digest).stat().st_size == artifact.size
    # JSON values stay JSON in the rows: the model and the dataclass as objects, the enum as its value.
    assert record.result["cfg"] == {"lr": 0.6000000000000001, "day": "2026-01-02"}
    assert record.result["box"] == {"width": 6, "tags": ["a", "b"]} and record.result["colour"] == "blue"


def test_client_output_returns_each_output_decoded(client: Client) -> None:
    run = client.submit(flows.typed, {"n": 4})
    assert run.wait(timeout=60).status is RunStatus.OK
    want = flows.expected_values(4)
    frame = client.output(run.id, "frame")
    assert type(frame) is pd.DataFrame
    pd.testing.assert_frame_equal(frame, want["frame"])
    np.testing.assert_array_equal(client.output(run.id, "arr"), want["arr"])
    assert client.output(run.id, "span") == want["span"]
    assert client.output(run.id, "cfg") == {"lr": 0.4, "day": "2026-01-02"}  # JSON, unless a type is asked for
    assert client.output(run.id, "cfg", flows.Cfg) == want["cfg"]
    assert client.output(run.id, "colour", flows.Colour) is flows.Colour.BLUE
    with pytest.raises(OutputNotFound, match=r"made no output 'model'; the outputs it did make: arr, box, cfg"):
        client.output(run.id, "model")


@pytest.mark.parametrize("flow, expected", [
    (flows.object_array, "message 'arr' of node 'make_objects' is a numpy array of dtype object (Python objects, "
                         "shape (3,)), which cannot be stored without pickle"),
    (flows.object_frame, "message 'table' of node 'make_object_frame' is a pandas DataFrame that Parquet cannot "
                         "hold: "),
])
def test_a_value_its_codec_cannot_carry_fails_naming_the_value(client: Client, flow: Any, expected: str) -> None:
    record = client.submit(flow).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    (node,) = record.nodes
    assert node.error.startswith(expected), node.error
    if flow is flows.object_frame:
        assert "column things" in node.error


def test_a_misannotated_parameter_fails_naming_message_parameter_type_and_what_did_not_fit(client: Client) -> None:
    record = client.submit(flows.misannotated).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    assert node_of(record, "make_array_not_frame").status.value == "ok"
    assert node_of(record, "count_rows").error == (
        "message 'frame' for parameter 'frame' of node 'count_rows' must be pandas.DataFrame: Input should be an "
        "instance of DataFrame (got a numpy.ndarray of shape (2, 3))")


def test_the_run_cache_restores_a_codec_output_without_a_call_under_the_same_digest(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows, "MARKS", tmp_path / "marks")
    first = client.submit(flows.cached, {"n": 5, "tag": "again"}).wait(timeout=60)
    second = client.submit(flows.cached, {"n": 5, "tag": "again"}).wait(timeout=60)
    assert first.status is RunStatus.OK and second.status is RunStatus.OK
    restored = node_of(second, "make_frame")
    assert restored.status.value == "cached" and restored.cached_from == first.id and restored.machine is None
    assert len(list((tmp_path / "marks").glob("again.*"))) == 1  # one call, in the first run
    rows = {r.id: {row.node: row.outputs for row in node_rows(client._runtime.db, r.id)} for r in (first, second)}
    assert rows[second.id]["make_frame"] == rows[first.id]["make_frame"]  # the same reference, the same digest
    # The reader's key holds that reference, so it is restored too: nothing is decoded to compare.
    assert node_of(second, "total").status.value == "cached"
    assert second.result["total"] == first.result["total"] == float(flows.expected_values(5)["frame"]["value"].sum())
    pd.testing.assert_frame_equal(client.output(second.id, "frame"), flows.expected_values(5)["frame"])


def test_a_run_reference_to_a_codec_output_and_a_frame_given_at_submit_reach_the_node(client: Client) -> None:
    source = client.submit(flows.typed, {"n": 3}).wait(timeout=60)
    assert source.status is RunStatus.OK
    by_run = client.submit(flows.consume, {"frame": f"@run:{source.id}.frame"}).wait(timeout=60)
    assert by_run.status is RunStatus.OK and by_run.result == {"rows": 3, "first": "r0"}
    assert by_run.params["frame"] == source.result["frame"]  # the run's row holds the reference it used
    digest = source.result["frame"]["$artifact"]["digest"]
    assert digest.startswith("blake3:")  # a codec's value, given by its BLAKE3 digest
    by_digest = client.submit(flows.consume, {"frame": digest}).wait(timeout=60)
    assert by_digest.result == {"rows": 3, "first": "r0"} and by_digest.params["frame"]["$artifact"]["codec"] == \
        "pandas"
    given = client.submit(flows.consume, {"frame": flows.expected_values(7)["frame"]}).wait(timeout=60)
    assert given.result == {"rows": 7, "first": "r0"} and given.params["frame"]["$artifact"]["codec"] == "pandas"
    with pytest.raises(RunRejected, match=r"input 'frame' of flow 'codec_consume' takes a pandas.DataFrame; "
                                          r"blake3:[0-9a-f]{64} holds a value of codec 'numpy'"):
        client.submit(flows.consume, {"frame": f"@run:{source.id}.arr"})
    with pytest.raises(RunRejected, match=r"must be a pandas.DataFrame, or a reference to one .*got builtins.list"):
        client.submit(flows.consume, {"frame": [1, 2]})


def test_a_mapped_node_maps_over_a_list_of_dataframes_one_call_per_frame(client: Client) -> None:
    record = client.submit(flows.shards, {"count": 4}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result["sizes"] == [{"rows": i + 1, "sum": 10 * i * (i + 1) // 2, "type": "DataFrame"}
                                      for i in range(4)]
    assert record.result["total"] == sum(10 * i * (i + 1) // 2 for i in range(4))
    # Elements that each return a frame make a list of frames for the node after them.
    assert record.result["joined"] == {"rows": 10, "sum": 2 * record.result["total"], "types": ["DataFrame"]}
    parts = client.output(record.id, "parts")
    assert [len(p) for p in parts] == [1, 2, 3, 4] and all(type(p) is pd.DataFrame for p in parts)
    assert sorted(n.index for n in record.nodes if n.node == "size") == [0, 1, 2, 3]


def test_a_20_mb_array_between_two_nodes_is_encoded_once_and_never_carried_as_json(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"encode": 0, "load": 0}
    put_stream, load = LocalArtifactStore.put_stream, np.load

    def counted_put_stream(*args: Any, **kwargs: Any) -> Any:
        calls["encode"] += 1
        return put_stream(*args, **kwargs)

    def counted_load(*args: Any, **kwargs: Any) -> Any:
        calls["load"] += 1
        return load(*args, **kwargs)

    monkeypatch.setattr(LocalArtifactStore, "put_stream", counted_put_stream)
    monkeypatch.setattr(np, "load", counted_load)
    record = client.submit(flows.big, {"megabytes": 20}, no_cache=True).wait(timeout=120)
    assert record.status is RunStatus.OK and record.result == {"mean": 0.5}
    assert calls == {"encode": 1, "load": 1}  # written once by the producer, read once by the consumer
    outputs = {row.node: row.outputs for row in node_rows(client._runtime.db, record.id)}
    assert len(json.dumps(outputs["fill"])) < 300  # the row (and the call's message) holds only the reference
    (stored,) = client.artifacts(record.id)
    assert stored.codec == "numpy" and stored.size > 20 * (1 << 20)
    big_files = [p for p in client._runtime.artifacts.root.rglob("*") if p.is_file() and p.stat().st_size > 1 << 20]
    assert big_files == [client._runtime.artifacts.path(stored.digest)]


def test_fluksio_show_names_the_codec_size_and_digest_and_artifact_get_writes_the_encoded_file(
        client: Client, tmp_path: Path) -> None:
    record = client.submit(flows.typed, {"n": 5}).wait(timeout=60)
    assert record.status is RunStatus.OK
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env.update(FLUKSIO_DATABASE_URL=client.settings.database_url, COLUMNS="250",
               FLUKSIO_ARTIFACTS_DIR=str(client.settings.artifacts_dir), FLUKSIO_CONFIG=str(tmp_path / "none.toml"))
    command = [sys.executable, "-m", "fluksio.cli.main"]
    shown = subprocess.run([*command, "show", record.id], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    arr = record.result["arr"]["$artifact"]
    table_row = next(line for line in shown.stdout.splitlines() if "arr.npy" in line and "blake3:" in line)
    assert "numpy" in table_row and arr["digest"] in table_row and f"{arr['size']} B" in table_row
    assert f"numpy arr.npy ({arr['size']} B, {arr['digest'][:19]}…)" in shown.stdout  # the result, summarised
    assert "pandas df" not in shown.stdout and "pandas frame.parquet" in shown.stdout
    target = tmp_path / "arr.npy"
    got = subprocess.run([*command, "artifact", "get", arr["digest"], "-o", str(target)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    np.testing.assert_array_equal(np.load(target, allow_pickle=False), flows.expected_values(5)["arr"])


def test_a_flow_input_declared_as_a_model_arrives_as_that_model_even_unannotated(client: Client) -> None:
    flow = Flow("codec_model_input", inputs={"cfg": flows.Cfg, "day": date})

    @flow.node(provides="out")
    def use(cfg, day):  # no annotations: the flow's declaration decides
        return [type(cfg).__name__, type(cfg.day).__name__, type(day).__name__, (day - cfg.day).days]

    record = client.submit(flow, {"cfg": flows.Cfg(lr=0.1, day=date(2026, 1, 2)), "day": date(2026, 1, 5)}).wait(
        timeout=60)
    assert record.status is RunStatus.OK, [n.error for n in record.nodes]
    assert record.result == {"out": ["Cfg", "date", "date", 3]}
    assert record.params == {"cfg": {"lr": 0.1, "day": "2026-01-02"}, "day": "2026-01-05"}  # JSON in the row
