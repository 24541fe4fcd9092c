"""Faults survived, each by killing or stopping a real process: a driver (kill -9), the broker (restarted),
the run store (PostgreSQL stopped for seconds), and 200 submits racing from 8 processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from fluksio import Client, RunStatus
from fluksio.client import RunHandle
from fluksio.clock import utcnow
from fluksio.store.models import RunMetric, RunNode
from tests.conftest import Compass
from tests.integration.support import cluster_flows as flows
from tests.integration.support.cluster import FAULT_TIMINGS, Cluster, running_cluster
from tests.integration.support.explorer import UiProcess
from tests.integration.support.servers import PostgresServer, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path, postgres: PostgresServer) -> Iterator[Cluster]:
    with running_cluster(tmp_path, {"node-1": ("--cpus", "2", "--gpus", "none")}, postgres.new_database(),
                         env=FAULT_TIMINGS) as setup:
        yield setup


def start_driver(cluster: Cluster, name: str, auto_resume: bool) -> None:
    cluster.env["FLUKSIO_AUTO_RESUME"] = "true" if auto_resume else "false"
    cluster.start_worker(name, "--drivers-only")


def slow_chain_started(cluster: Cluster, client: Client, tag: str, pause: float) -> RunHandle:
    """Submit ``slow_chain`` and return its handle once its first node has started (a fault can strike)."""
    run = client.submit(flows.slow_chain, {"tag": tag, "pause": pause})
    wait_for(lambda: list(cluster.marks.glob(f"{tag}.*")), 30, "the first node never started")
    return run


def no_grant_held(cluster: Cluster) -> bool:
    with cluster.client() as client:
        return all(m["calls"] == 0 for m in client.placement()["machines"])


def test_kill_9_of_the_driver_abandons_the_run_then_resume_finishes_it(cluster: Cluster,
                                                                       compass: Compass) -> None:
    start_driver(cluster, "drv-a", auto_resume=False)
    with cluster.client() as client:
        run = slow_chain_started(cluster, client, "drv-kill", pause=1.5)
        cluster.kill("drv-a")
        start_driver(cluster, "drv-b", auto_resume=False)
        wait_for(lambda: client.get(run.id).status is RunStatus.ABANDONED, 30, "never abandoned")
        assert "stopped refreshing the lease" in client.get(run.id).status_reason
        wait_for(lambda: no_grant_held(cluster), 15, "a grant stayed held")
        record = client.resume(run.id).wait(timeout=60)
        assert record.status is RunStatus.OK and record.result == {"d": 4}
        assert record.resumed_from is RunStatus.ABANDONED
    compass.add("faults survived")


def test_kill_9_of_the_driver_with_auto_resume(cluster: Cluster, compass: Compass) -> None:
    start_driver(cluster, "drv-c", auto_resume=True)
    with cluster.client() as client:
        run = slow_chain_started(cluster, client, "drv-auto", pause=1.5)
        cluster.kill("drv-c")
        start_driver(cluster, "drv-d", auto_resume=True)
        record = run.wait(timeout=90)
        assert record.status is RunStatus.OK, record.status_reason
        assert record.resumed_from is RunStatus.ABANDONED and record.resume_count == 1
        wait_for(lambda: no_grant_held(cluster), 15, "a grant stayed held")
    compass.add("faults survived")


def test_a_driver_killed_mid_map_is_seen_driverless_and_its_return_starts_no_element_twice(
        cluster: Cluster, compass: Compass) -> None:
    start_driver(cluster, "drv-m", auto_resume=True)
    ui = UiProcess(cluster.workdir, cluster.env).wait_ready()
    try:
        with cluster.client() as client:
            # Four elements on a node worker with two cpus: two run (held at a gate) when the only driver dies.
            run = client.submit(flows.gated_map, {"tag": "mapkill", "items": [0, 1, 2, 3]})
            wait_for(lambda: len(cluster.marked("mapkill")) == 2, 30, "two elements never started")
            cluster.kill("drv-m")
            killed = utcnow()
            driverless = "no driver has refreshed this run"
            wait_for(lambda: driverless in (client.get(run.id).status_reason or ""), 15,
                     "the client never said that no driver drives the run")
            shown = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "show", run.id], env=cluster.env,
                                   cwd=cluster.workdir, capture_output=True, text=True, timeout=60)
            assert driverless in " ".join(shown.stdout.split()), shown.stdout + shown.stderr
            assert driverless in ui.api(f"/api/runs/{run.id}")["status_reason"]
            # No `fluksio resume`: a driver coming back picks the run up, and adopts the two still running.
            start_driver(cluster, "drv-n", auto_resume=True)
            def driven_again() -> bool:
                record = client.get(run.id)  # claimed again, and its drive's loop has refreshed the lease since
                started = record.drive_started_at
                return (record.status is RunStatus.RUNNING and record.resume_count == 1 and started is not None
                        and started > killed and record.lease_at is not None and record.lease_at > started)

            wait_for(driven_again, 60, "the run was never driven again")
            assert len(cluster.marked("mapkill")) == 2  # the two still running were adopted, not sent again
            (cluster.marks / "gate-mapkill").write_text("go")
            record = run.wait(timeout=90)
            assert record.status is RunStatus.OK, record.status_reason
            assert record.result == {"x": [0, 1, 2, 3]} and record.resume_count == 1
            started = [name.split(".")[1] for name in cluster.marked("mapkill")]
            assert sorted(started) == ["0", "1", "2", "3"], started  # each element started once, no more
            rows = sorted((n.node, n.index, n.status.value) for n in record.nodes)
            assert rows == [("element_at_gate", i, "ok") for i in range(4)], rows
            # Its history: the drive that died, on which machine, and the time without a driver; the duration
            # counts from the first start.
            [dead] = record.drives
            assert (dead.epoch, dead.driver, dead.ended_as) == (0, "drv-m", "abandoned") and record.driver == "drv-n"
            assert dead.last_lease_at is not None and record.drive_started_at is not None
            assert record.drive_started_at - dead.last_lease_at >= timedelta(seconds=3)  # the stale limit at least
            assert record.started_at is not None and record.started_at < killed
            assert record.duration_ms == int((record.finished_at - record.started_at).total_seconds() * 1000)
            page = ui.get(f"/runs/{run.id}").body.decode()
            assert 'id="drives"' in page and "drv-m" in page and "drv-n" in page and "abandoned" in page
            shown = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "show", run.id], env=cluster.env,
                                   cwd=cluster.workdir, capture_output=True, text=True, timeout=60)
            said = " ".join(shown.stdout.split())
            assert "drive 0 on drv-m" in said and "without a driver" in said and "drive 1 on drv-n" in said, said
            wait_for(lambda: no_grant_held(cluster), 15, "a grant stayed held")
    finally:
        ui.stop()
    compass.add("faults survived")


def test_redis_restarted_mid_run_completes_or_names_the_broker(cluster: Cluster, compass: Compass) -> None:
    start_driver(cluster, "drv-r", auto_resume=False)
    with cluster.client() as client:
        run = slow_chain_started(cluster, client, "redis-restart", pause=1.0)
        cluster.redis.stop()
        time.sleep(1.0)
        cluster.redis.start()
        started = time.monotonic()
        record = run.wait(timeout=120)  # the bound: nothing hangs past it
        assert time.monotonic() - started < 120
        assert record.status in (RunStatus.OK, RunStatus.ERROR)
        if record.status is RunStatus.ERROR:
            assert f"127.0.0.1:{cluster.redis.port}" in record.status_reason
        else:
            assert record.result == {"d": 4}
        # The installation still works after the restart.
        cluster.wait_attached("node-1")
        assert client.submit(flows.tiny, {"i": 1}).wait(timeout=60).status is RunStatus.OK
    compass.add("faults survived")


def test_the_database_stopped_for_seconds_mid_run(cluster: Cluster, postgres: PostgresServer,
                                                  compass: Compass) -> None:
    start_driver(cluster, "drv-p", auto_resume=False)
    with cluster.client() as client:
        run = slow_chain_started(cluster, client, "db-outage", pause=1.0)
        postgres.pause()
        time.sleep(4)
        postgres.resume()
        record = run.wait(timeout=90)
        assert record.status is RunStatus.OK, record.status_reason
        assert record.result == {"d": 4}
        assert len(client.metrics(run.id)["progress"]) == 10
        assert client.runs(status="running") == []
    compass.add("faults survived")


SUBMITTER = """
import json, sys
from fluksio import Settings, connect
sys.path.insert(0, sys.argv[2])
from tests.integration.support import cluster_flows as flows
settings = Settings(**json.loads(sys.argv[1]))
with connect(settings) as client:
    ids = [client.submit(flows.tiny, {"i": int(sys.argv[3]) * 100 + k}).id for k in range(25)]
print(json.dumps(ids))
"""


def test_200_submits_from_8_processes_all_finish_with_no_duplicate_or_lost_rows(
        cluster: Cluster, compass: Compass) -> None:
    start_driver(cluster, "drv-s", auto_resume=False)
    cluster.start_worker("node-2", "--cpus", "2", "--gpus", "none")
    cluster.wait_attached("node-2")
    settings = cluster.settings()
    config = json.dumps({"broker_url": settings.broker_url, "database_url": settings.database_url,
                         "artifacts_dir": str(settings.artifacts_dir), "flows": settings.flows})
    repo = str(Path(__file__).resolve().parents[2])
    submitters = [subprocess.Popen([sys.executable, "-c", SUBMITTER, config, repo, str(p)],
                                   stdout=subprocess.PIPE, text=True, env=cluster.env) for p in range(8)]
    ids = [run_id for s in submitters for run_id in json.loads(s.communicate(timeout=120)[0])]
    assert len(ids) == len(set(ids)) == 200
    with cluster.client() as client:
        deadline = time.monotonic() + 240
        records = [client.handle(run_id).wait(timeout=max(1.0, deadline - time.monotonic())) for run_id in ids]
        lost = sum(r.status is not RunStatus.OK for r in records)
        with client._runtime.db.read() as session:
            node_rows = session.scalar(select(func.count()).select_from(RunNode).where(RunNode.run_id.in_(ids)))
            distinct = session.scalar(select(func.count(func.distinct(RunNode.run_id + RunNode.node)))
                                      .where(RunNode.run_id.in_(ids)))
            metric_rows = session.scalar(select(func.count()).select_from(RunMetric)
                                         .where(RunMetric.run_id.in_(ids)))
    compass.add("runs lost", lost)
    compass.add("rows duplicated", node_rows - distinct)
    assert lost == 0, sorted({(r.status.value, r.status_reason) for r in records if r.status is not RunStatus.OK})
    assert node_rows == distinct == 200
    assert metric_rows == 200 * 10
    compass.add("faults survived")


def test_a_driver_worker_stopped_mid_run_hands_the_run_over(cluster: Cluster, compass: Compass) -> None:
    start_driver(cluster, "drv-h", auto_resume=True)
    with cluster.client() as client:
        run = client.submit(flows.slow_chain, {"tag": "handover", "pause": 1.0})
        wait_for(lambda: list(cluster.marks.glob("handover.*")), 30, "the first node never started")
        started = time.monotonic()
        cluster.stop("drv-h")  # a warm shutdown must not wait for the run to end
        assert time.monotonic() - started < 15
        wait_for(lambda: client.get(run.id).resume_count == 1, 15,
                 f"the run was not handed over: {client.get(run.id).status} {client.get(run.id).status_reason}")
        start_driver(cluster, "drv-i", auto_resume=True)
        record = run.wait(timeout=60)
        assert record.status is RunStatus.OK and record.resumed_from is RunStatus.ABANDONED
    compass.add("faults survived")
