"""The run service's promises on the embedded default: cache, artifacts, references, seeds, idempotency,
metrics, sweeps and cancel. Each test fails if its promise is broken."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import event

from fluksio import Artifact, Client, Flow, RunRejected, RunStatus, Settings, connect
from fluksio.cache.lookup import lookup
from fluksio.store.models import RunNode

pytestmark = pytest.mark.integration


def counted_flow(calls: list[str], name: str = "counted") -> Flow:
    flow = Flow(name, inputs={"x": int}, outputs=["y", "blob"])

    @flow.node(provides="doubled", streams=["loss"])
    def double(x, emit):
        calls.append("double")
        for step in range(3):
            emit("loss", 1.0 / (step + 1))
        return 2 * x

    @flow.node(provides=["y", "blob"])
    def finish(doubled):
        calls.append("finish")
        return {"y": doubled + 1, "blob": Artifact.from_bytes(f"y={doubled + 1}".encode(), name="y.txt")}

    return flow


# -- cache ---------------------------------------------------------------------------------------


def test_a_repeated_run_is_restored_from_the_cache_pointing_at_the_original(client: Client) -> None:
    calls: list[str] = []
    flow = counted_flow(calls)
    first = client.submit(flow, {"x": 3}).wait(timeout=30)
    second = client.submit(flow, {"x": 3}).wait(timeout=30)
    third = client.submit(flow, {"x": 3}).wait(timeout=30)

    assert calls == ["double", "finish"]  # executed once, restored twice
    assert second.result == first.result and third.result == first.result
    for record in (second, third):
        assert {n.status.value for n in record.nodes} == {"cached"}
        assert {n.cached_from for n in record.nodes} == {first.id}  # the original, never a copy
    # The loss series of a cached node is read through the pointer.
    assert client.metrics(second.id) == client.metrics(first.id) == {"loss": [(0, 1.0), (1, 0.5), (2, 1 / 3)]}


def test_different_inputs_no_cache_and_opted_out_nodes_are_misses(client: Client) -> None:
    calls: list[str] = []
    flow = counted_flow(calls)
    client.submit(flow, {"x": 1}).wait(timeout=30)
    client.submit(flow, {"x": 2}).wait(timeout=30)
    assert calls.count("double") == 2
    record = client.submit(flow, {"x": 1}, no_cache=True).wait(timeout=30)
    assert {n.status.value for n in record.nodes} == {"ok"} and calls.count("double") == 3

    opted: list[int] = []
    fresh = Flow("fresh", outputs=["now"])

    @fresh.node(provides="now", cache=False)
    def now():
        opted.append(1)
        return len(opted)

    assert client.submit(fresh).wait(timeout=30).result == {"now": 1}
    assert client.submit(fresh).wait(timeout=30).result == {"now": 2}


def test_an_entry_whose_artifact_is_gone_is_a_miss(client: Client) -> None:
    calls: list[str] = []
    flow = counted_flow(calls)
    first = client.submit(flow, {"x": 5}).wait(timeout=30)
    client._runtime.artifacts.path(first.result["blob"]["$artifact"]["digest"]).unlink()
    second = client.submit(flow, {"x": 5}).wait(timeout=30)
    statuses = {n.node: n.status.value for n in second.nodes}
    assert statuses == {"double": "cached", "finish": "ok"}  # only the node whose bytes vanished ran again
    assert calls == ["double", "finish", "finish"]


def test_outputs_over_256_kb_are_not_cached(client: Client) -> None:
    runs: list[int] = []
    flow = Flow("big_output", outputs=["text"])

    @flow.node(provides="text")
    def big():
        runs.append(1)
        return "x" * (300 * 1024)

    client.submit(flow).wait(timeout=30)
    record = client.submit(flow).wait(timeout=30)
    assert record.nodes[0].status.value == "ok" and len(runs) == 2


def write_flow_tree(root: Path, helper_body: str, node_body: str) -> None:
    (root / "helpers.py").write_text(f"def helper(x):\n    return {helper_body}\n")
    (root / "edited.py").write_text(
        "from fluksio import Flow\n"
        "from helpers import helper\n"
        "flow = Flow('edited', inputs={'x': int}, outputs=['y'])\n"
        "@flow.node(provides='y')\n"
        f"def compute(x):\n    return {node_body}\n"
    )


def load_afresh(client: Client, file: Path) -> Flow:
    """The flow as a process started now loads it (the file and the helpers it imports, as on disk)."""
    for name in [n for n in sys.modules if n == "helpers" or n.startswith("fluksio_flowfile_edited_")]:
        del sys.modules[name]
    return client.flow(f"{file}:flow")


def test_editing_the_function_or_what_it_imports_is_a_miss(client: Client, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    write_flow_tree(tree, "x + 1", "helper(x)")
    flow = load_afresh(client, tree / "edited.py")
    first = client.submit(flow, {"x": 1}).wait(timeout=30)
    repeat = client.submit(flow, {"x": 1}).wait(timeout=30)
    assert repeat.nodes[0].status.value == "cached"

    write_flow_tree(tree, "x + 1", "helper(x)  # edited")  # the node's own file
    # This process still runs the code it imported: the same code, the same digest, a hit.
    stale = client.submit(flow, {"x": 1}).wait(timeout=30)
    assert stale.nodes[0].status.value == "cached" and stale.code_digest == first.code_digest
    edited = client.submit(load_afresh(client, tree / "edited.py"), {"x": 1}).wait(timeout=30)
    assert edited.nodes[0].status.value == "ok" and edited.code_digest != first.code_digest

    write_flow_tree(tree, "x + 2", "helper(x)  # edited")  # a module it imports from the same tree
    helper_edited = client.submit(load_afresh(client, tree / "edited.py"), {"x": 1}).wait(timeout=30)
    assert helper_edited.nodes[0].status.value == "ok" and helper_edited.result == {"y": 3}
    assert len({first.code_digest, edited.code_digest, helper_edited.code_digest}) == 3

    (tree / "scratch.py").write_text("print('a script next to the flow, never imported by it')\n")
    unrelated = client.submit(load_afresh(client, tree / "edited.py"), {"x": 1}).wait(timeout=30)
    assert unrelated.nodes[0].status.value == "cached" and unrelated.code_digest == helper_edited.code_digest


def test_a_cache_lookup_that_fails_is_a_miss_and_a_warning(client: Client, caplog: pytest.LogCaptureFixture) -> None:
    class BrokenStore:
        def exists(self, digest: str) -> bool:
            raise OSError("the artifact disk went away")

    calls: list[str] = []
    flow = counted_flow(calls)
    client.submit(flow, {"x": 7}).wait(timeout=30)
    with client._runtime.db.read() as session:
        key = session.query(RunNode.cache_key).filter(RunNode.node == "finish").scalar()
    with caplog.at_level(logging.WARNING, logger="fluksio.cache.lookup"):
        assert lookup(client._runtime.db, BrokenStore(), key) is None  # type: ignore[arg-type]
    assert "cache lookup" in caplog.text and "failed" in caplog.text


# -- artifacts -------------------------------------------------------------------------------------


def test_artifacts_round_trip_between_nodes(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "weights.bin"
    source.write_bytes(b"\x00\x01binary")
    flow = Flow("artifact_trip", outputs=["size", "text", "same_path"])

    @flow.node(provides=["a", "b"])
    def make():
        return {"a": Artifact.from_bytes(b"hello", name="a.txt"), "b": Artifact.from_path(source)}

    @flow.node(provides=["size", "text", "same_path"])
    def use(a, b):
        assert isinstance(a, Artifact) and isinstance(b, Artifact)
        return {"size": len(b.read_bytes()), "text": a.read_bytes().decode(),
                "same_path": b.path.read_bytes() == source.read_bytes()}

    record = client.submit(flow).wait(timeout=30)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"size": 8, "text": "hello", "same_path": True}


# -- references ------------------------------------------------------------------------------------


def consumer_flow() -> Flow:
    flow = Flow("consumer", inputs={"y": int, "blob": Artifact}, outputs=["echo"])

    @flow.node(provides="echo")
    def echo(y, blob):
        return f"{y}:{blob.read_bytes().decode()}"

    return flow


def test_run_and_digest_references_resolve_at_submit_and_are_stored_resolved(client: Client) -> None:
    made = client.submit(counted_flow([]), {"x": 4}).wait(timeout=30)
    digest = made.result["blob"]["$artifact"]["digest"]
    run = client.submit(consumer_flow(), {"y": f"@run:{made.id}.y", "blob": digest})
    record = run.wait(timeout=30)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"echo": "9:y=9"}
    assert record.params["y"] == 9 and record.params["blob"]["$artifact"]["digest"] == digest
    # A run reference to an artifact output, and a short (prefix) run id.
    via_run = client.submit(consumer_flow(), {"y": 1, "blob": f"@run:{made.id[:16]}.blob"}).wait(timeout=30)
    assert via_run.result == {"echo": "1:y=9"}
    # An intermediate message (not a declared output) is a value the run produced too.
    doubled = client.submit(consumer_flow(), {"y": f"@run:{made.id}.doubled", "blob": digest}).wait(timeout=30)
    assert doubled.result == {"echo": "8:y=9"}


def test_every_reference_failure_names_the_parameter_and_what_exists(client: Client) -> None:
    made = client.submit(counted_flow([]), {"x": 4}).wait(timeout=30)
    flow = consumer_flow()
    digest = made.result["blob"]["$artifact"]["digest"]
    with pytest.raises(RunRejected, match=r"parameter 'y': there is no run '01NOSUCHRUN'"):
        client.submit(flow, {"y": "@run:01NOSUCHRUN.y", "blob": digest})
    with pytest.raises(RunRejected, match=r"parameter 'y': run \w+ made no output 'accuracy'; "
                                          r"the outputs it did make: blob, doubled, loss, y"):
        client.submit(flow, {"y": f"@run:{made.id}.accuracy", "blob": digest})
    with pytest.raises(RunRejected, match=r"parameter 'y': '@run:oops' is not a run reference"):
        client.submit(flow, {"y": "@run:oops", "blob": digest})
    with pytest.raises(RunRejected, match=r"parameter 'blob': 'sha256:../../etc/passwd' is not an artifact digest"):
        client.submit(flow, {"y": 1, "blob": "sha256:../../etc/passwd"})
    with pytest.raises(RunRejected, match=r"parameter 'blob': no run produced an artifact sha256:0{64}"):
        client.submit(flow, {"y": 1, "blob": "sha256:" + "0" * 64})
    with pytest.raises(RunRejected, match=r"input 'blob' of flow 'consumer' takes an artifact"):
        client.submit(flow, {"y": 1, "blob": "plain text"})
    client._runtime.artifacts.path(digest).unlink()
    with pytest.raises(RunRejected, match=rf"parameter 'blob': the bytes of artifact {digest} are gone"):
        client.submit(flow, {"y": 1, "blob": digest})
    with pytest.raises(RunRejected, match=r"parameter 'blob': the bytes of artifact .* are gone"):
        client.submit(flow, {"y": 1, "blob": f"@run:{made.id}.blob"})
    assert [r.flow for r in client.runs()] == ["counted"]  # nothing half-written


# -- seeds and idempotency -------------------------------------------------------------------------


def test_seed_fills_the_seed_input_unless_a_parameter_gives_it(client: Client) -> None:
    flow = Flow("seeded", inputs={"seed": int, "lr": (float, 0.1)}, outputs=["seed"])

    @flow.node(provides="echo")
    def use(seed, lr):
        return seed

    filled = client.submit(flow, seed=7)
    given = client.submit(flow, {"seed": 3}, seed=7)
    other = client.submit(flow, seed=8)
    records = [filled.wait(timeout=30), given.wait(timeout=30), other.wait(timeout=30)]
    assert [r.params["seed"] for r in records] == [7, 3, 8]
    assert [r.seed for r in records] == [7, 7, 8]
    digests = {run.id: client._runtime.db for run in (filled, given, other)}
    from fluksio.store.run_rows import get_run

    assert len({get_run(client._runtime.db, run_id).params_digest for run_id in digests}) == 3


def test_priority_is_stored_on_the_run_and_a_bad_one_is_refused(client: Client) -> None:
    flow = counted_flow([], name="prioritised")
    record = client.submit(flow, {"x": 1}, priority=7).wait(timeout=30)
    assert (record.status, record.priority) == (RunStatus.OK, 7)
    swept = client.sweep(flow, {"x": [2, 3]}, priority=-2).wait(timeout=30)
    assert [r.priority for r in swept] == [-2, -2]
    for bad in (True, 1.5, "high", 2**31):
        with pytest.raises(RunRejected, match="priority must be a whole number"):
            client.submit(flow, {"x": 1}, priority=bad)  # type: ignore[arg-type]


def test_idempotent_submits_racing_in_threads_make_one_run(client: Client) -> None:
    flow = counted_flow([])
    barrier = threading.Barrier(8)
    ids: list[str] = []

    def submit() -> None:
        barrier.wait()
        ids.append(client.submit(flow, {"x": 1}, idempotency_key="race-threads").id)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(ids) == 8 and len(set(ids)) == 1
    assert len(client.runs(flow="counted")) == 1


RACER = """
import sys, time
from fluksio import Settings
from fluksio.flows.registry import FlowRegistry
from fluksio.artifacts.local import LocalArtifactStore
from fluksio.runs.submit import submit_run
from fluksio.store.db import Database
settings = Settings(database_url=sys.argv[1], artifacts_dir=sys.argv[2])
registry = FlowRegistry()
flow = registry.resolve(sys.argv[3] + ":flow")
db = Database(settings.database_url)
start = float(sys.argv[4])
time.sleep(max(0.0, start - time.time()))
run, created = submit_run(db, registry, LocalArtifactStore(settings.artifacts_dir), flow, engine="embedded",
                          params={"x": 1}, idempotency_key="race-processes")
print(run.id, created)
"""


def test_idempotent_submits_racing_in_processes_make_one_run(client: Client, settings: Settings,
                                                             tmp_path: Path) -> None:
    (tmp_path / "raced.py").write_text(
        "from fluksio import Flow\nflow = Flow('raced', inputs={'x': int})\n"
        "@flow.node(provides='y')\ndef f(x): return x\n")
    start = time.time() + 3
    racers = [subprocess.Popen([sys.executable, "-c", RACER, settings.database_url, str(settings.artifacts_dir),
                                str(tmp_path / "raced.py"), str(start)], stdout=subprocess.PIPE, text=True)
              for _ in range(8)]
    replies = [racer.communicate(timeout=60)[0].split() for racer in racers]
    assert all(racer.returncode == 0 for racer in racers)
    assert len({run_id for run_id, _ in replies}) == 1
    assert [created for _, created in replies].count("True") == 1
    assert len(client.runs(flow="raced")) == 1


# -- metrics ---------------------------------------------------------------------------------------


def test_metric_steps_count_emissions_and_non_finite_values_never_reach_the_table(client: Client) -> None:
    flow = Flow("metrics")

    @flow.node(provides="done", streams=["loss", "acc", "note"])
    def train(emit):
        for value in (1.0, float("nan"), 0.5, float("inf"), True, 0.25, -float("inf")):
            emit("loss", value)
        emit("acc", 3)
        emit("note", "not a number")
        return True

    record = client.submit(flow).wait(timeout=30)
    assert record.status is RunStatus.OK
    assert client.metrics(record.id) == {"acc": [(0, 3.0)], "loss": [(0, 1.0), (1, 0.5), (2, 0.25)]}


def test_a_10000_step_loop_is_a_handful_of_statements_and_every_row_lands(client: Client) -> None:
    flow = Flow("many_steps")

    @flow.node(provides="done", streams=["loss"])
    def train(emit):
        for step in range(10_000):
            emit("loss", step / 10_000)
        return True

    statements: list[str] = []

    def count(conn, cursor, statement, *args):  # noqa: ANN001, ANN002
        if "run_metrics" in statement and statement.lstrip().upper().startswith("INSERT"):
            statements.append(statement)

    event.listen(client._runtime.db.write_engine, "before_cursor_execute", count)
    try:
        record = client.submit(flow).wait(timeout=60)
    finally:
        event.remove(client._runtime.db.write_engine, "before_cursor_execute", count)
    series = client.metrics(record.id)["loss"]
    assert len(series) == 10_000 and series[-1] == (9_999, 0.9999)
    assert 1 <= len(statements) <= 10, len(statements)


# -- sweeps ----------------------------------------------------------------------------------------


def test_a_sweep_is_the_cartesian_product_in_one_group(client: Client) -> None:
    flow = Flow("swept", inputs={"lr": float, "depth": int, "seed": int}, outputs=["score"])

    @flow.node(provides="score", streams=["loss"])
    def fit(lr, depth, seed, emit):
        emit("loss", lr * depth + seed)
        return lr * depth + seed

    sweep = client.sweep(flow, grid={"lr": [0.1, 0.01], "depth": [1, 2, 3]}, seeds=[1, 2])
    records = sweep.wait(timeout=60)
    assert len(records) == 12 and {r.status for r in records} == {RunStatus.OK}
    assert {r.group_id for r in records} == {sweep.group_id}
    combos = {(r.params["lr"], r.params["depth"], r.params["seed"]) for r in records}
    assert combos == {(lr, d, s) for lr in (0.1, 0.01) for d in (1, 2, 3) for s in (1, 2)}
    assert len(client.runs(group=sweep.group_id, limit=100)) == 12


# -- cancel ----------------------------------------------------------------------------------------


def test_cancel_stops_a_node_stuck_in_a_long_sleep_within_seconds(client: Client) -> None:
    started = threading.Event()
    spinning = threading.Event()
    spun: list[str] = []
    flow = Flow("stuck", outputs=["a", "b"])

    @flow.node(provides="a")
    def sleeper():
        started.set()
        time.sleep(3600)

    @flow.node(provides="b")
    def spinner():
        spinning.set()
        try:
            while True:  # pure Python: interrupted at its next instruction
                pass
        finally:
            spun.append("stopped")

    run = client.submit(flow)
    assert started.wait(10) and spinning.wait(10)
    t0 = time.monotonic()
    client.cancel(run.id)
    record = run.wait(timeout=10)
    assert time.monotonic() - t0 < 5
    assert record.status is RunStatus.CANCELLED
    assert {n.status.value for n in record.nodes} == {"cancelled"}
    deadline = time.monotonic() + 5
    while not spun and time.monotonic() < deadline:
        time.sleep(0.05)
    assert spun == ["stopped"]
    machine = client.placement()["machines"][0]
    assert machine["free"]["cpus"] == machine["total"]["cpus"] and machine["calls"] == 0


def test_cancelling_one_run_of_a_sweep_leaves_the_others_running(settings: Settings) -> None:
    gate = threading.Event()
    flow = Flow("sibling", inputs={"i": int}, outputs=["i"])

    @flow.node(provides="out")
    def wait_then_return(i):
        gate.wait(20)
        return i

    with connect(settings.model_copy(update={"cpus": 3})) as client:
        sweep = client.sweep(flow, grid={"i": [1, 2, 3]})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(r.status is not RunStatus.RUNNING for r in sweep.runs):
            time.sleep(0.05)
        client.cancel(sweep.runs[1].id)
        assert sweep.runs[1].wait(timeout=10).status is RunStatus.CANCELLED
        assert sweep.runs[0].status is RunStatus.RUNNING and sweep.runs[2].status is RunStatus.RUNNING
        gate.set()
        assert [r.wait(timeout=10).status for r in (sweep.runs[0], sweep.runs[2])] == [RunStatus.OK] * 2


# -- what the review found -------------------------------------------------------------------------


def test_cancelling_a_run_whose_nodes_wait_for_resources_clears_the_placer_waiting_list(client: Client) -> None:
    gate = threading.Event()
    flow = Flow("crowded", outputs=["a", "b", "c"])
    for name in ("a", "b", "c"):
        flow.node(lambda: gate.wait(20), name=f"make_{name}", provides=name, requires=[])
    run = client.submit(flow)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not client.placement()["waiting"]:
        time.sleep(0.02)
    assert [w["run_id"] for w in client.placement()["waiting"]] == [run.id]  # 2 cpus, 3 nodes
    client.cancel(run.id)
    assert run.wait(timeout=10).status is RunStatus.CANCELLED
    assert client.placement()["waiting"] == []
    gate.set()


def test_a_retried_node_leaves_only_its_last_attempts_metric_steps(client: Client) -> None:
    attempts: list[int] = []
    flow = Flow("retried_metrics")

    @flow.node(provides="done", streams=["loss"], retries=1)
    def train(emit):
        attempts.append(1)
        steps = 3 if len(attempts) == 1 else 2
        for step in range(steps):
            emit("loss", 10.0 * len(attempts) + step)
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails after three steps")
        return True

    record = client.submit(flow).wait(timeout=30)
    assert record.status is RunStatus.OK
    assert client.metrics(record.id) == {"loss": [(0, 20.0), (1, 21.0)]}


def test_a_written_out_artifact_reference_is_checked_at_submit(client: Client) -> None:
    flow = Flow("takes_artifact", inputs={"blob": Artifact})

    @flow.node(provides="size")
    def size(blob):
        return blob.size

    with pytest.raises(RunRejected, match="parameter 'blob': no run produced an artifact sha256:"):
        client.submit(flow, {"blob": {"$artifact": {"digest": "sha256:" + "1" * 64, "size": 3}}})
    with pytest.raises(RunRejected, match="is not an artifact reference"):
        client.submit(flow, {"blob": {"$artifact": {"size": 3}}})
    assert client.runs() == []


def test_a_sweep_with_one_bad_point_journals_nothing(client: Client) -> None:
    flow = Flow("strict_sweep", inputs={"lr": float})

    @flow.node(provides="y")
    def fit(lr):
        return lr

    with pytest.raises(RunRejected, match="input 'lr' of flow 'strict_sweep' must be float"):
        client.sweep(flow, grid={"lr": [0.1, "fast"]})
    assert client.runs() == []
