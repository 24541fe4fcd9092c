"""The client's reads that the front doors use (``fluksio`` commands and the explorer): flows, runs without their
nodes and their count, metrics, artifacts, events and run ends — on a real embedded installation."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fluksio import Artifact, Client, Flow, RunStatus, Settings, connect
from fluksio.artifacts import digest_of
from fluksio.errors import (
    ArtifactError,
    ClientClosed,
    ConfigError,
    FlowNotFound,
    RunNotFound,
    RunRejected,
)

REPORT = b"3 steps"


def measured() -> Flow:
    flow = Flow("measured", inputs={"steps": (int, 3)}, outputs=["report"])

    @flow.node(provides="report", streams=["loss"], cache=False)
    def fit(steps: int, emit: Any) -> Artifact:
        for step in range(steps):
            emit("loss", float(steps - step))
        return Artifact.from_bytes(f"{steps} steps".encode(), name="report.txt")

    return flow


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    folder = tmp_path_factory.mktemp("client")
    with connect(Settings(database_url=f"sqlite:///{folder / 'runs.db'}", artifacts_dir=folder / "artifacts",
                          cpus=2)) as client:
        yield client


@pytest.fixture(scope="module")
def done(client: Client) -> str:
    """A finished run of :func:`measured`: three losses (3, 2, 1) and one artifact."""
    record = client.submit(measured()).wait(timeout=30)
    assert record.status is RunStatus.OK, record.status_reason
    return record.id


def test_flow_loads_a_reference_and_flows_names_those_registered(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "shipped.py"
    source.write_text("from fluksio import Flow\n\nflow = Flow('shipped')\n\n\n@flow.node(provides='x')\n"
                      "def one() -> int:\n    return 1\n")
    flow = client.flow(f"{source}:flow")
    assert flow.name == "shipped" and "shipped" in client.flows()
    assert client.flow("shipped") is flow  # by name, once registered
    assert client.flows() == sorted(client.flows())
    with pytest.raises(FlowNotFound, match="no flow named 'unheard_of' is registered here"):
        client.flow("unheard_of")


def test_get_without_nodes_is_the_record_runs_lists(client: Client, done: str) -> None:
    whole = client.get(done[:10])  # a prefix works, as everywhere
    bare = client.get(done[:10], nodes=False)
    assert whole.nodes and bare.nodes == []
    assert bare == whole.model_copy(update={"nodes": []})
    assert bare in client.runs(flow="measured")
    with pytest.raises(RunNotFound, match="no run 'nope'"):
        client.get("nope", nodes=False)


def test_count_runs_counts_what_runs_pages_through(client: Client, done: str) -> None:
    assert client.count_runs(flow="measured") == len(client.runs(flow="measured", limit=1000)) >= 1
    assert client.count_runs(flow="measured", status="error") == 0
    assert client.count_runs(parent=done) == 0  # a parent by id (or prefix) with no child runs
    assert "measured" in client.flows_with_runs()
    with pytest.raises(RunRejected, match="status 'finished' is not one of"):
        client.count_runs(status="finished")
    with pytest.raises(RunNotFound):
        client.count_runs(parent="nope")


def test_resumed_at_says_when_a_run_was_last_resumed(client: Client) -> None:
    tries: list[int] = []
    flow = Flow("fails_once", outputs=["x"])

    @flow.node(provides="x", cache=False)
    def flaky() -> int:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("the first try fails")
        return 1

    first = client.submit(flow).wait(timeout=30)
    assert first.status is RunStatus.ERROR and client.resumed_at(first.id) is None
    resumed = client.resume(first.id).wait(timeout=30)
    assert resumed.status is RunStatus.OK
    at = client.resumed_at(first.id)
    assert at is not None and resumed.created_at <= at <= resumed.finished_at


def test_latest_metrics_are_each_runs_newest_values(client: Client, done: str) -> None:
    quiet = client.submit(measured(), {"steps": 0}).wait(timeout=30)
    assert client.latest_metrics([done, quiet.id]) == {done: {"loss": 1.0}, quiet.id: {}}
    assert client.latest_metrics([]) == {}
    with pytest.raises(RunRejected, match="a list of run ids"):
        client.latest_metrics(done)


def test_series_reads_one_series_at_a_time(client: Client, done: str) -> None:
    assert client.series.newest(done) == {"loss": (2, 1.0)}
    assert client.series.sources(done[:10]) == {"loss": (done, 3)}
    assert client.series.read(done, "loss") == [(0, 3.0), (1, 2.0), (2, 1.0)]
    assert client.series.read(done, "loss", start=1, end=1) == [(1, 2.0)]
    assert client.series.read(done, "accuracy") == []
    with pytest.raises(RunNotFound):
        client.series.sources("nope")


def test_artifacts_of_a_run_and_their_bytes(client: Client, done: str) -> None:
    [row] = client.artifacts(done[:10])
    assert (row.node, row.message, row.name, row.size) == ("fit", "report", "report.txt", len(REPORT))
    assert row.digest == digest_of(REPORT)
    assert client.artifact(row.digest).run_id == done
    with client.open_artifact(row.digest) as stored:
        assert stored.read() == REPORT
    with pytest.raises(ArtifactError, match="no run made an artifact"):
        client.artifact(digest_of(b"bytes no run made"))
    with pytest.raises(ArtifactError):
        client.artifact("../../etc/passwd")
    with pytest.raises(ArtifactError):
        client.open_artifact("sha256:not-hex")
    with pytest.raises(RunNotFound):
        client.artifacts("nope")


def test_subscribe_and_watch_end_follow_a_run_driven_here(client: Client) -> None:
    gate = threading.Event()
    flow = Flow("gated_reads", outputs=["x"])

    @flow.node(provides="x", cache=False)
    def held() -> int:
        gate.wait(30)
        return 1

    events: list[dict[str, Any]] = []
    unsubscribe = client.subscribe(events.append)
    try:
        handle = client.submit(flow)
        with client.watch_end(handle.id) as ended:
            assert not ended.is_set()
            gate.set()
            assert ended.wait(30), "the run's end was not told to this process"
            assert handle.status is RunStatus.OK  # told once the row says so
        deadline = time.monotonic() + 10
        while not any(e["event"] == "run_finished" and e["run_id"] == handle.id for e in events):
            assert time.monotonic() < deadline, events
            time.sleep(0.01)
    finally:
        unsubscribe()
    kinds = [e["event"] for e in events if e.get("run_id") == handle.id]
    assert kinds[0] in ("run_queued", "run_started") and "node_finished" in kinds
    seen = len(events)
    client.submit(flow).wait(timeout=30)
    assert len(events) == seen  # unsubscribed: nothing more
    with pytest.raises(TypeError, match="a function of one event"):
        client.subscribe("print")  # type: ignore[arg-type]


def test_an_event_stream_needs_a_shared_broker(client: Client) -> None:
    with pytest.raises(ConfigError, match="FLUKSIO_BROKER_URL"):
        client.event_stream()


def test_a_closed_client_refuses_every_read(tmp_path: Path) -> None:
    closed = connect(Settings(database_url=f"sqlite:///{tmp_path / 'runs.db'}", artifacts_dir=tmp_path / "a", cpus=1))
    closed.close()
    reads = [lambda: closed.flow("x"), closed.flows, closed.flows_with_runs, lambda: closed.count_runs(),
             lambda: closed.get("x", nodes=False), lambda: closed.resumed_at("x"),
             lambda: closed.latest_metrics([]), lambda: closed.artifacts("x"),
             lambda: closed.artifact(digest_of(b"")), lambda: closed.open_artifact(digest_of(b"")),
             lambda: closed.subscribe(print), closed.event_stream, lambda: closed.watch_end("x"),
             lambda: closed.series.newest("x"), lambda: closed.series.sources("x"),
             lambda: closed.series.read("x", "loss")]
    for read in reads:
        with pytest.raises(ClientClosed, match="this fluksio client is closed"):
            read()
