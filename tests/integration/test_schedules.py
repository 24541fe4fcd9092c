"""Schedules fired by real `fluksio beat` processes on a real Redis, runs driven by a real `fluksio worker`;
and alerts sent by that worker's driver process."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import update

from fluksio import Client
from fluksio.schemas import RunRecord
from fluksio.store.models import Schedule
from tests.integration.support.cluster import Cluster
from tests.integration.support.receivers import WebhookReceiver, wait_for
from tests.integration.support.servers import RedisServer

pytestmark = pytest.mark.integration

SECRET = "s3cret"


class Beats:
    """`fluksio beat` processes of the installation, each with a log of its own."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> subprocess.Popen[bytes]:
        log = open(self.cluster.workdir / f"beat-{name}.log", "ab")  # noqa: SIM115 - kept open for the process
        process = subprocess.Popen([sys.executable, "-m", "fluksio.cli.main", "beat", "--loglevel", "info"],
                                   env=self.cluster.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[name] = process
        wait_for(lambda: "beat: Starting" in self.log(name) or process.poll() is not None, 30, f"beat {name}")
        assert process.poll() is None, self.log(name)
        return process

    def log(self, name: str) -> str:
        path = self.cluster.workdir / f"beat-{name}.log"
        return path.read_text() if path.exists() else ""

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        process = self.processes.pop(name)
        os.killpg(process.pid, sig)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            # Where it is stuck: a beat prints every thread's stack on SIGUSR1 (into its log, here).
            os.kill(process.pid, signal.SIGUSR1)
            with contextlib.suppress(Exception):
                wait_for(lambda: "most recent call first" in self.log(name), 5, "its stacks")
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(15)
            pytest.fail(f"beat {name} did not stop within 15 s of signal {sig}; its log ends:\n"
                        + self.log(name)[-6000:])

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(redis_server: RedisServer, receiver: WebhookReceiver,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("schedules")
    rules = workdir / "alerts.json"
    rules.write_text(json.dumps([
        {"name": "broken-runs", "statuses": ["error"], "flow": "broken",
         "webhook": {"url": f"{receiver.url}/driver", "secret": SECRET}},
        {"name": "cancelled-runs", "statuses": ["cancelled"], "webhook": {"url": f"{receiver.url}/cancel"}},
    ]))
    setup = Cluster(workdir, redis_server)
    setup.env.update({"FLUKSIO_SCHEDULE_REFRESH_S": "0.5", "FLUKSIO_ALERTS": str(rules),
                      "FLUKSIO_ALERT_BACKOFF_S": "0.1"})
    setup.start_worker("sched", "--drivers", "--cpus", "4")
    try:
        setup.wait_attached("sched")
        yield setup
    finally:
        setup.stop_all()


@pytest.fixture
def beats(cluster: Cluster) -> Iterator[Beats]:
    started = Beats(cluster)
    yield started
    started.stop_all()


@pytest.fixture
def client(cluster: Cluster, receiver: WebhookReceiver) -> Iterator[Client]:
    settings = cluster.settings().model_copy(update={"alerts": Path(cluster.env["FLUKSIO_ALERTS"])})
    with Client(settings) as connected:
        yield connected
        for record in connected.schedules.list():
            connected.schedules.remove(record.name)


def runs_of(client: Client, name: str) -> list[RunRecord]:
    return client.runs(schedule=name, limit=1000)


def ticks(client: Client, name: str) -> Counter[datetime]:
    return Counter(r.schedule_tick for r in runs_of(client, name))


def consecutive(moments: list[datetime], step_s: int) -> bool:
    return all(b - a == timedelta(seconds=step_s) for a, b in zip(moments, moments[1:]))


def test_two_beats_start_exactly_one_run_per_tick(client: Client, beats: Beats) -> None:
    client.schedule("pair", "tiny", every="2s", params={"i": 3})
    beats.start("one")
    beats.start("two")
    wait_for(lambda: len(ticks(client, "pair")) >= 6, 40, "six ticks of an --every 2s schedule")
    beats.stop_all()
    counted = ticks(client, "pair")
    assert set(counted.values()) == {1}, counted  # no tick has two runs
    assert consecutive(sorted(counted), 2)  # and none was skipped
    started = sum(beats.log(n).count("started run") for n in ("one", "two"))
    already = sum(beats.log(n).count("has its run already") for n in ("one", "two"))
    # Both beats fired ticks, and the index let one win each (a beat stopped between journaling a tick's run and
    # logging it leaves that one run unlogged).
    assert len(counted) - 1 <= started <= len(counted) and already >= 1
    # A beat stopped between journaling a tick's run and handing it to a driver leaves it queued until a
    # driver's sweeper finds it, a stale limit later: the wait allows for that.
    runs = wait_for(lambda: (rs := runs_of(client, "pair")) and all(r.status.value == "ok" for r in rs) and rs,
                    client.settings.stale_after_s + 30, "the scheduled runs to be driven to their end: "
                    f"{[(r.id, r.status.value, r.status_reason) for r in runs_of(client, 'pair')]} when it began")
    assert {r.schedule for r in runs} == {"pair"} and {r.result["out"] for r in runs} == {3}


def test_a_beat_killed_and_restarted_starts_no_second_run_of_a_tick(client: Client, beats: Beats,
                                                                    cluster: Cluster) -> None:
    client.schedule("restart", "tiny", every="2s", params={"i": 1}, catchup="all")
    beats.start("first")
    wait_for(lambda: len(ticks(client, "restart")) >= 2, 20, "two ticks")
    beats.stop("first", signal.SIGKILL)
    # As if it died after journaling its last runs but before recording their ticks: the restarted beat
    # fires those ticks again.
    with client._runtime.db.write() as session:
        session.execute(update(Schedule).where(Schedule.name == "restart").values(
            last_tick=min(ticks(client, "restart")) - timedelta(seconds=2)))
    beats.start("second")
    wait_for(lambda: len(ticks(client, "restart")) >= 5, 30, "three more ticks after the restart")
    beats.stop_all()
    counted = ticks(client, "restart")
    assert set(counted.values()) == {1}, counted
    assert consecutive(sorted(counted), 2)  # catchup all filled the ticks the dead beat missed
    assert "has its run already" in beats.log("second")


def test_a_schedule_added_while_the_beat_runs_is_picked_up(client: Client, beats: Beats) -> None:
    beats.start("watcher")
    added = datetime.now(timezone.utc)
    client.schedule("late", "tiny", every="1s", params={"i": 2})
    run = wait_for(lambda: runs_of(client, "late"), 15, "a run of the schedule added while the beat ran")[-1]
    assert run.schedule_tick is not None and run.schedule_tick >= added - timedelta(seconds=1)
    assert "watching schedule late" in beats.log("watcher")
    client.schedules.remove("late")
    wait_for(lambda: "schedule late removed or paused" in beats.log("watcher"), 10, "the beat to drop it")


def test_catchup_last_fires_once_for_the_newest_tick_missed_while_no_beat_ran(client: Client, beats: Beats) -> None:
    client.schedule("gap", "tiny", every="2s", params={"i": 4})
    beats.start("before")
    wait_for(lambda: ticks(client, "gap"), 15, "a first tick")
    beats.stop("before")
    last_before = max(ticks(client, "gap"))
    wait_for(lambda: datetime.now(timezone.utc) > last_before + timedelta(seconds=7), 15, "three missed ticks")
    beats.start("after")
    wait_for(lambda: max(ticks(client, "gap")) > last_before, 15, "the catch-up run")
    beats.stop_all()
    after = sorted(t for t in ticks(client, "gap") if t > last_before)
    # At least the two ticks after the last one before the stop came while no beat ran …
    assert after[0] - last_before >= timedelta(seconds=6)  # … and got no runs of their own …
    # … but the newest of them did, as soon as the beat looked, and then the ticks came as they came.
    assert (f"catches up (catchup=last) on 1 tick(s) missed while no beat watched it: {after[0].isoformat()}"
            in beats.log("after"))
    assert consecutive(after, 2)


def test_sigusr1_prints_where_a_beat_is_and_it_goes_on(client: Client, beats: Beats) -> None:
    # Signalled once it is past its start (it read the schedules): during its imports its main thread's stack
    # is deeper than the 100 frames faulthandler prints, and start_beat, at its bottom, is cut off.
    client.schedule("stacks-hourly", "tiny", every="1h", params={"i": 1})
    process = beats.start("stacks")
    wait_for(lambda: "beat: watching schedule stacks-hourly" in beats.log("stacks"), 15, "the beat's first read")
    os.kill(process.pid, signal.SIGUSR1)
    wait_for(lambda: "most recent call first" in beats.log("stacks"), 15, "the beat's stacks in its log")
    assert "start_beat" in beats.log("stacks") and process.poll() is None
    beats.stop("stacks")
    assert process.returncode == 0
    client.schedules.remove("stacks-hourly")


def test_fluksio_runs_lists_a_schedules_runs(client: Client, beats: Beats, cluster: Cluster) -> None:
    client.schedule("listed", "tiny", every="1s", params={"i": 5})
    beats.start("lister")
    wait_for(lambda: runs_of(client, "listed"), 15, "a run")
    beats.stop_all()
    env = {**cluster.env, "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "runs", "--schedule", "listed", "--json"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert listed and {r["schedule"] for r in listed} == {"listed"} and all(r["schedule_tick"] for r in listed)
    shown = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "schedule", "list"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert "listed" in shown.stdout and "every 1 s" in shown.stdout


def test_worker_with_drivers_and_beat_fires_schedules(client: Client, cluster: Cluster) -> None:
    client.schedule("beside", "tiny", every="1s", params={"i": 6})
    process = cluster.start_worker("withbeat", "--drivers", "--beat", "--cpus", "1")
    try:
        run = wait_for(lambda: [r for r in runs_of(client, "beside") if r.status.value == "ok"], 60,
                       "a run fired by the worker's beat")[0]
        assert run.result == {"out": 6}
    finally:
        cluster.stop("withbeat")
    assert process.returncode is not None


def test_the_driver_process_alerts_on_a_failing_run(client: Client, receiver: WebhookReceiver) -> None:
    receiver.reset()
    record = client.submit("broken", {"batch": 11}).wait(timeout=60)
    assert record.status.value == "error"
    [request] = wait_for(lambda: [r for r in receiver.requests if r.path == "/driver"], 20, "the driver's alert")
    assert request.headers["X-Fluksio-Signature"] == "sha256=" + hmac.new(
        SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    body = json.loads(request.body)
    assert body["run_id"] == record.id and body["failed_nodes"] == ["explode"] and "bad batch 11" in body["reason"]


def test_cancelling_a_queued_run_alerts(client: Client, receiver: WebhookReceiver) -> None:
    receiver.reset()
    handle = client.submit("late")  # needs a machine labelled 'late': it stays queued
    assert client.cancel(handle.id).value == "cancelled"
    [request] = wait_for(lambda: [r for r in receiver.requests if r.path == "/cancel"], 20, "the cancel alert")
    assert json.loads(request.body)["run_id"] == handle.id and json.loads(request.body)["status"] == "cancelled"
