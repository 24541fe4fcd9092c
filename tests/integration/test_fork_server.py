"""The fork server with real processes, without Celery: this test process plays the pool process that asks
for GPU calls (fluksio/execution/warm.py), a real ``python -m fluksio.execution.forkserver`` forks them."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio.clock import utcnow
from fluksio.errors import NodeFailed
from fluksio.execution.warm import WarmStarts
from fluksio.messages import NodeCall
from fluksio.schemas import Grant
from fluksio.store.db import Database
from fluksio.store.metrics import read_metrics
from fluksio.store.models import Run
from fluksio.store.run_rows import insert_run
from tests.integration.support.processes import gone, wait_for_mark

pytestmark = pytest.mark.integration

FLOWS = Path(__file__).parent / "support" / "gpu_flows.py"


def call_of(flow: str, node: str, inputs: dict | None = None, digest: str | None = None) -> NodeCall:
    call_id = f"run1.{node}.{time.time_ns()}"
    return NodeCall(call_id=call_id, run_id="run1", flow=flow, node=node, attempt=1, inputs=inputs or {},
                    grant=Grant(id=call_id, machine="box", cpus=1, gpus=(0,)), code_digest=digest)


@pytest.fixture(scope="module")
def installation(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment a worker gives its fork server: a run store, artifacts, the flows, a folder for marks."""
    workdir = tmp_path_factory.mktemp("forkserver")
    database = f"sqlite:///{workdir / 'fluksio.db'}"
    store = Database(database)
    store.upgrade()
    # The run the calls belong to (their metric rows point at it).
    insert_run(store, Run(id="run1", flow="gpu_talk", params={}, params_digest="p", status="running",
                          created_at=utcnow(), engine="redis"))
    store.dispose()
    return {"FLUKSIO_DATABASE_URL": database, "FLUKSIO_ARTIFACTS_DIR": str(workdir / "artifacts"),
            "FLUKSIO_FLOWS": str(FLOWS), "FLUKSIO_CONFIG": str(workdir / "none.toml"),
            "TEST_FLUKSIO_MARKS": str(workdir / "marks")}


@pytest.fixture(autouse=True)
def _environment(_clean_fluksio_env: None, installation: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """What this process has while a test runs: what a worker has (its fresh interpreters inherit it)."""
    for key, value in installation.items():
        monkeypatch.setenv(key, value)


def marks(installation: dict[str, str]) -> Path:
    return Path(installation["TEST_FLUKSIO_MARKS"])


@pytest.fixture(scope="module")
def warm(installation: dict[str, str]) -> Iterator[WarmStarts]:
    with pytest.MonkeyPatch.context() as patch:  # module-wide: before any test's own environment exists
        for key in [k for k in os.environ if k.startswith("FLUKSIO_")]:
            patch.delenv(key)
        for key, value in installation.items():
            patch.setenv(key, value)
        starts = WarmStarts.start()
    assert starts.wait_ready() is None
    yield starts
    starts.close()


def test_concurrent_calls_each_see_exactly_their_gpu_ids_in_a_child_of_the_server(warm: WarmStarts) -> None:
    grants = [(0,), (1, 2), (3,)]
    seen: dict[tuple[int, ...], dict] = {}

    def run(gpus: tuple[int, ...]) -> None:
        seen[gpus] = warm.run(call_of("gpu_trio", "gpu0", {"pause": 0.5}), gpus, None).outputs["seen0"]

    threads = [threading.Thread(target=run, args=(gpus,)) for gpus in grants]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert {gpus: s["devices"] for gpus, s in seen.items()} == {(0,): "0", (1, 2): "1,2", (3,): "3"}
    assert all("fluksio.execution.forkserver" in s["parent"] for s in seen.values())
    assert len({s["pid"] for s in seen.values()}) == 3
    spans = sorted(s["span"] for s in seen.values())
    assert spans[0][1] > spans[-1][0], "the three calls did not run at the same time"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # set in the child alone


def test_logs_metrics_and_outputs_come_back(warm: WarmStarts, installation: dict[str, str]) -> None:
    call = call_of("gpu_talk", "talkative")
    ran = warm.run(call, (1,), None)
    for line in ("printed by the node", "logged by the node", "written to fd 1", "written to fd 2"):
        assert ran.logs.count(line) == 1, ran.logs  # the server's own log handler is not the call's
    assert ran.outputs["seen"]["devices"] == "1"
    assert ran.outputs["loss"] == pytest.approx(1 / 3)
    (made,) = ran.artifacts
    assert made.message == "blob" and Path(installation["FLUKSIO_ARTIFACTS_DIR"]).exists()
    assert [value for _, value in read_metrics(Database(installation["FLUKSIO_DATABASE_URL"]), "run1")["loss"]] \
        == pytest.approx([1.0, 0.5, 1 / 3])


def test_a_call_past_its_timeout_is_killed(warm: WarmStarts, installation: dict[str, str]) -> None:
    started = time.monotonic()
    with pytest.raises(NodeFailed, match="timed out after 1 s") as failed:
        warm.run(call_of("gpu_overdue", "past_its_timeout", {"tag": "overdue"}), (0,), 1.0)
    assert time.monotonic() - started < 8
    assert "going to sleep" in (failed.value.logs or "")
    assert gone(wait_for_mark(marks(installation), "overdue"))


def test_a_child_that_dies_before_reporting_says_its_exit_code(warm: WarmStarts) -> None:
    with pytest.raises(NodeFailed, match="exited with code 7 before reporting") as failed:
        warm.run(call_of("gpu_crash", "exits_at_once"), (0,), None)
    assert "about to exit" in (failed.value.logs or "")


def test_a_call_claimed_with_other_code_than_the_server_loaded_is_refused(warm: WarmStarts) -> None:
    with pytest.raises(NodeFailed, match="loaded other code for flow 'gpu_talk' than this run was claimed with"):
        warm.run(call_of("gpu_talk", "talkative", digest="sha256:" + "0" * 64), (0,), None)


def test_closing_the_worker_side_ends_the_server_and_its_calls(installation: dict[str, str]) -> None:
    starts = WarmStarts.start()
    assert starts.wait_ready() is None
    failure: list[BaseException] = []

    def run() -> None:
        try:
            starts.run(call_of("gpu_stuck", "sleep_on_gpu", {"tag": "orphan"}), (0,), None)
        except BaseException as exc:  # noqa: BLE001 - looked at below
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    pid = wait_for_mark(marks(installation), "orphan")
    starts.close()
    assert starts.process.returncode is not None
    assert gone(pid)
    thread.join(15)
    assert failure and "went away while node 'sleep_on_gpu' ran" in str(failure[0])


def test_a_server_that_is_gone_means_fresh_interpreters_said_once(installation: dict[str, str],
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    starts = WarmStarts.start()
    assert starts.wait_ready() is None
    os.kill(starts.process.pid, signal.SIGKILL)
    starts.process.wait(10)
    with caplog.at_level(logging.WARNING, logger="fluksio.execution.warm"):
        first = starts.run(call_of("gpu_trio", "gpu1", {"pause": 0.0}), (2,), None).outputs["seen1"]
        second = starts.run(call_of("gpu_trio", "gpu1", {"pause": 0.0}), (3,), None).outputs["seen1"]
    assert (first["devices"], second["devices"]) == ("2", "3")
    assert "forkserver" not in first["parent"]  # a fresh interpreter, started by this process
    said = [r.getMessage() for r in caplog.records if "fresh interpreter" in r.getMessage()]
    assert len(said) == 1 and "its fork server is gone" in said[0]
    starts.close()


def test_flows_that_start_cuda_at_import_mean_fresh_interpreters(installation: dict[str, str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_FAKE_CUDA_AT_IMPORT", "1")
    starts = WarmStarts.start()
    why = starts.wait_ready()
    assert why is not None and "the CUDA driver library" in why
    assert "libcuda.so.1 is loaded once the flow modules are imported" in why
    assert starts.process.returncode == 0  # it said why and left
    seen = starts.run(call_of("gpu_trio", "gpu2", {"pause": 0.0}), (1,), None).outputs["seen2"]
    assert seen["devices"] == "1" and "forkserver" not in seen["parent"]
