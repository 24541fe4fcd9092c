"""Graphs that take their shape at run time, on the embedded default: mapped nodes and conditional nodes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fluksio import Client, Flow, Resources, RunStatus, Settings, connect

pytestmark = pytest.mark.integration


def counting_flow(calls: list[str], name: str = "shards") -> Flow:
    flow = Flow(name, inputs={"names": list[str], "vocab": (dict, {})}, outputs=["counts", "total"])

    @flow.node(provides="counts", map={"shard": "names"}, streams=["loss"], resources=Resources(cpus=1))
    def count(shard: str, vocab: dict, emit) -> int:
        calls.append(shard)
        emit("loss", float(len(shard)))
        emit("loss", len(shard) / 2)
        return len(shard) + len(vocab)

    @flow.node(provides="total")
    def add(counts: list[int]) -> int:
        return sum(counts)

    return flow


def latest_rows(record, node: str) -> dict[int, object]:
    rows: dict[int, object] = {}
    for row in record.nodes:
        newer = row.index not in rows or row.attempt > rows[row.index].attempt
        if row.node == node and row.index is not None and newer:
            rows[row.index] = row
    return rows


def test_a_mapped_node_is_one_call_per_element_and_provides_its_list_in_order(client: Client) -> None:
    calls: list[str] = []
    record = client.submit(counting_flow(calls), {"names": ["a", "bbb", "cc"], "vocab": {"x": 1}}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"counts": [2, 4, 3], "total": 9}
    assert sorted(calls) == ["a", "bbb", "cc"]
    elements = latest_rows(record, "count")
    assert sorted(elements) == [0, 1, 2] and {r.status.value for r in elements.values()} == {"ok"}
    assert [n.index for n in record.nodes if n.node == "add"] == [None]
    # Each element's numbers are a series of its own.
    assert client.metrics(record.id) == {f"loss[{i}]": [(0, float(n)), (1, n / 2)] for i, n in enumerate([1, 3, 2])}


def test_an_empty_list_makes_no_call_one_ok_row_and_empty_lists(client: Client) -> None:
    calls: list[str] = []
    record = client.submit(counting_flow(calls, "empty"), {"names": []}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"counts": [], "total": 0} and calls == []
    [row] = [n for n in record.nodes if n.node == "count"]
    assert (row.status.value, row.index) == ("ok", None)
    assert "mapped over no elements" in (row.logs or "")


def test_a_failing_element_fails_the_node_after_the_others_ran_and_the_reason_names_it(client: Client) -> None:
    flow = Flow("one_bad", inputs={"xs": list[int]}, outputs=["ys", "total"])

    @flow.node(provides="ys", map={"x": "xs"})
    def check(x: int) -> int:
        if x in (3, 7):
            raise ValueError(f"bad shard {x}")
        return x

    @flow.node(provides="total")
    def add(ys: list[int]) -> int:
        return sum(ys)

    record = client.submit(flow, {"xs": list(range(10))}).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    assert "check[3]: ValueError: bad shard 3" in record.status_reason
    assert "check[7]: ValueError: bad shard 7" in record.status_reason
    elements = latest_rows(record, "check")
    assert len(elements) == 10  # every other element ran to its end and kept its row
    assert sorted(i for i, r in elements.items() if r.status.value == "error") == [3, 7]
    assert [n.status.value for n in record.nodes if n.node == "add"] == ["skipped"]


def test_a_rerun_with_one_more_element_runs_one_call(client: Client) -> None:
    calls: list[str] = []
    flow = counting_flow(calls, "grown")
    first = client.submit(flow, {"names": ["a", "bb", "ccc"]}).wait(timeout=60)
    assert first.status is RunStatus.OK
    calls.clear()
    second = client.submit(flow, {"names": ["a", "dddd", "bb", "ccc"]}).wait(timeout=60)
    assert second.status is RunStatus.OK and second.result["counts"] == [1, 4, 2, 3]
    assert calls == ["dddd"]  # the others came from the cache, element by element
    cached = latest_rows(second, "count")
    assert [cached[i].status.value for i in range(4)] == ["cached", "ok", "cached", "cached"]
    assert {cached[i].cached_from for i in (0, 2, 3)} == {first.id}
    # A cached element's series is read from the element that made it (bb was element 1, is element 2 now).
    assert client.metrics(second.id)["loss[2]"] == client.metrics(first.id)["loss[1]"]


def test_resume_after_one_element_failed_runs_that_element_alone(client: Client, tmp_path: Path) -> None:
    flag = tmp_path / "fail-once"
    flag.write_text("x")
    calls: list[int] = []
    flow = Flow("resumable_map", inputs={"xs": list[int]}, outputs=["ys"])

    @flow.node(provides="ys", map={"x": "xs"}, cache=False)
    def step(x: int) -> int:
        calls.append(x)
        if x == 2 and flag.exists():
            raise RuntimeError("transient")
        return x * 10

    failed = client.submit(flow, {"xs": [0, 1, 2, 3]}).wait(timeout=60)
    assert failed.status is RunStatus.ERROR and "step[2]" in failed.status_reason
    flag.unlink()
    calls.clear()
    resumed = client.resume(failed.id).wait(timeout=60)
    assert resumed.status is RunStatus.OK, resumed.status_reason
    assert calls == [2] and resumed.result == {"ys": [0, 10, 20, 30]}
    assert [(r.attempt, r.status.value) for r in resumed.nodes if r.node == "step" and r.index == 2] == [
        (1, "error"), (2, "ok")]


def test_max_parallel_caps_how_many_elements_run_at_once(client: Client) -> None:
    flow = Flow("capped", inputs={"xs": list[int]}, outputs=["spans"])

    @flow.node(provides="spans", map={"x": "xs"}, max_parallel=1)
    def slow(x: int) -> list[float]:
        started = time.time()
        time.sleep(0.05)
        return [started, time.time()]

    record = client.submit(flow, {"xs": [1, 2, 3, 4]}).wait(timeout=60)
    assert record.status is RunStatus.OK
    spans = sorted(record.result["spans"])
    assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:]))  # never two at once


def test_a_mapped_message_that_is_not_a_list_fails_the_node_naming_its_type(client: Client) -> None:
    flow = Flow("not_a_list", inputs={"n": int}, outputs=["ys"])
    flow.node(lambda n: {"n": n}, name="make", provides="xs")
    flow.node(lambda x: x, name="each", provides="ys", map={"x": "xs"})
    record = client.submit(flow, {"n": 1}).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    assert "maps 'x' over 'xs', which is a dict, not a list" in record.status_reason


def test_a_list_longer_than_max_elements_fails_the_node_naming_the_setting(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", artifacts_dir=tmp_path / "a", max_elements=3)
    flow = Flow("too_long", inputs={"xs": list[int]}, outputs=["ys"])
    flow.node(lambda x: x, name="each", provides="ys", map={"x": "xs"})
    with connect(settings) as small:
        record = small.submit(flow, {"xs": [1, 2, 3, 4]}).wait(timeout=60)
    assert record.status is RunStatus.ERROR and "more than max_elements (3)" in record.status_reason


def test_waiting_elements_are_counted_in_the_reason_the_placer_and_the_events(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", artifacts_dir=tmp_path / "a", cpus=2,
                        lease_interval_s=0.2)
    release = threading.Event()
    flow = Flow("crowded", inputs={"xs": list[int]}, outputs=["ys"])

    @flow.node(provides="ys", map={"x": "xs"}, resources=Resources(cpus=1))
    def hold(x: int) -> int:
        release.wait(30)
        return x

    events: list[dict] = []
    with connect(settings) as client:
        client.subscribe(lambda e: events.append(e) if e.get("event") == "node_queued" else None)
        run = client.submit(flow, {"xs": list(range(6))})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "of 6 elements" not in (client.get(run.id).status_reason or ""):
            time.sleep(0.02)
        reason = client.get(run.id).status_reason
        waiting = client.placement()["waiting"]
        release.set()
        record = run.wait(timeout=60)
    assert reason == "Hold: 4 of 6 elements waiting for a worker with 1 cpu(s) free"
    assert [(w["node"], w["reason"]) for w in waiting] == [("hold", "4 of 6 elements waiting for a worker with "
                                                                    "1 cpu(s) free")]
    assert events and events[0]["node"] == "hold" and events[0]["elements_waiting"] == 4
    assert events[0]["elements"] == 6 and events[0]["reason"].startswith("4 of 6 elements waiting")
    assert record.status is RunStatus.OK and record.result == {"ys": list(range(6))}


def test_cancel_mid_map_kills_the_running_elements_and_starts_no_new_one(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", artifacts_dir=tmp_path / "a", cpus=2,
                        lease_interval_s=0.2)
    started: list[int] = []
    flow = Flow("cancelled_map", inputs={"xs": list[int]}, outputs=["ys"])

    @flow.node(provides="ys", map={"x": "xs"}, resources=Resources(cpus=1))
    def forever(x: int) -> int:
        started.append(x)
        time.sleep(60)
        return x

    with connect(settings) as client:
        run = client.submit(flow, {"xs": list(range(8))})
        deadline = time.monotonic() + 20
        while len(started) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        client.cancel(run.id)
        record = run.wait(timeout=30)
        machine = client.placement()["machines"][0]
    assert record.status is RunStatus.CANCELLED
    assert (machine["calls"], machine["free"]["cpus"]) == (0, 2)  # nothing runs on, nothing holds a cpu
    assert sorted(started) == [0, 1]
    rows = {(n.node, n.index): n for n in record.nodes}
    assert {rows[("forever", i)].error for i in (0, 1)} == {"cancelled while running"}
    assert rows[("forever", None)].error == "cancelled before 6 of its 8 elements started"


# -- conditions ------------------------------------------------------------------------------------


def release_flow() -> Flow:
    flow = Flow("release_if_better", inputs={"accuracy": float, "best_so_far": float},
                outputs=["summary", "release"])

    @flow.node(provides="better")
    def compare(accuracy: float, best_so_far: float) -> bool:
        return accuracy > best_so_far

    @flow.node(provides="release", when="better")
    def publish(accuracy: float) -> str:
        return f"released at {accuracy}"

    @flow.node(provides="note", unless="better")
    def explain(accuracy: float) -> str:
        return f"{accuracy} is not better"

    @flow.node(provides="summary")
    def summarize(release: str | None = None, note: str | None = None) -> str:
        return release or note or ""

    return flow


def test_when_and_unless_pick_a_branch_and_a_default_joins_them(client: Client) -> None:
    better = client.submit(release_flow(), {"accuracy": 0.9, "best_so_far": 0.8}).wait(timeout=60)
    worse = client.submit(release_flow(), {"accuracy": 0.5, "best_so_far": 0.8}).wait(timeout=60)
    assert (better.status, worse.status) == (RunStatus.OK, RunStatus.OK)  # skipped by conditions: still ok
    assert better.result == {"summary": "released at 0.9", "release": "released at 0.9"}
    assert worse.result == {"summary": "0.5 is not better", "release": None}  # a skipped output is None
    rows = {n.node: n for n in worse.nodes}
    assert rows["publish"].status.value == "skipped" and rows["publish"].error == "skipped: 'better' was false"
    assert rows["explain"].status.value == "ok" and rows["summarize"].status.value == "ok"
    assert {n.node: n.status.value for n in better.nodes}["explain"] == "skipped"


def test_when_and_map_combine(client: Client) -> None:
    flow = Flow("maybe_map", inputs={"xs": list[int], "go": bool}, outputs=["ys"])
    flow.node(lambda x: x + 1, name="each", provides="ys", map={"x": "xs"}, when="go")
    ran = client.submit(flow, {"xs": [1, 2], "go": True}).wait(timeout=60)
    skipped = client.submit(flow, {"xs": [1, 2], "go": False}).wait(timeout=60)
    assert ran.result == {"ys": [2, 3]}
    assert skipped.status is RunStatus.OK and skipped.result == {"ys": None}
    assert [(n.node, n.index, n.status.value) for n in skipped.nodes] == [("each", None, "skipped")]


def test_artifacts_of_elements_are_recorded_with_their_element(client: Client) -> None:
    from fluksio import Artifact

    flow = Flow("element_artifacts", inputs={"xs": list[int]}, outputs=["blobs"])
    flow.node(lambda x: Artifact.from_bytes(bytes([x]) * 3, name=f"b{x}.bin"), name="make", provides="blobs",
              map={"x": "xs"})
    record = client.submit(flow, {"xs": [1, 2]}).wait(timeout=60)
    assert record.status is RunStatus.OK
    rows = client.artifacts(record.id)
    assert sorted((a.element, a.name) for a in rows) == [(0, "b1.bin"), (1, "b2.bin")]
