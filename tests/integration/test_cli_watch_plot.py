"""`fluksio watch`, `runs`, `show` and `plot` as a user runs them against a real installation (redis-server and
a `fluksio worker`), and the live progress display fed by real events."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rich.console import Console

from fluksio import Client, RunStatus
from fluksio.cli import live
from fluksio.constants import EVENTS_CHANNEL
from tests.integration.support import cluster_flows as flows
from tests.integration.support.cluster import Cluster, running_cluster
from tests.integration.support.servers import in_ci

pytestmark = pytest.mark.integration

FLUKSIO = [sys.executable, "-m", "fluksio.cli.main"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    machines = {"cpu-a": ("--cpus", "2", "--gpus", "none", "--drivers")}
    with running_cluster(tmp_path_factory.mktemp("watch"), machines) as setup:
        yield setup


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Client]:
    with cluster.client() as connected:
        yield connected


def fluksio(cluster: Cluster, *args: str, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FLUKSIO, *args], cwd=cluster.workdir, env={**cluster.env, "COLUMNS": "200", **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


class Watcher:
    """`fluksio watch …` in the background, its output collected line by line."""

    def __init__(self, cluster: Cluster, *args: str) -> None:
        wait_for_subscribers(cluster, 0)
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [*FLUKSIO, "watch", *args], cwd=cluster.workdir, env={**cluster.env, "COLUMNS": "200"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 30) -> list[str]:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert time.monotonic() < deadline, f"no line with {text!r} in {self.lines}"
            assert self.process.poll() is None or self._reader.is_alive(), self.stderr()
            time.sleep(0.05)
        return list(self.lines)

    def stderr(self) -> str:
        return self.process.stderr.read() if self.process.stderr and self.process.poll() is not None else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
        self._reader.join(5)


def subscribers(cluster: Cluster) -> int:
    with redis.Redis.from_url(cluster.redis.url) as client:
        return client.pubsub_numsub(EVENTS_CHANNEL)[0][1]


def wait_for_subscribers(cluster: Cluster, count: int, timeout: float = 30) -> None:
    """Until exactly ``count`` clients listen on the events channel (0: earlier watchers are gone)."""
    deadline = time.monotonic() + timeout
    while (now := subscribers(cluster)) != count:
        assert time.monotonic() < deadline, f"{now} subscriber(s) to the events channel, not {count}"
        time.sleep(0.05)


def wait_for_mark(cluster: Cluster, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not (cluster.marks / name).exists():
        assert time.monotonic() < deadline, f"the node never left the mark {name}"
        time.sleep(0.05)


# -- watch -----------------------------------------------------------------------------------------


def test_watch_prints_each_event_of_a_run_as_one_readable_line(cluster: Cluster, client: Client) -> None:
    watcher = Watcher(cluster)
    try:
        wait_for_subscribers(cluster, 1)
        run = client.submit(flows.metered, {"lr": 0.2, "steps": 3})
        assert run.wait(timeout=60).status is RunStatus.OK
        lines = [line for line in watcher.wait_for("run_finished") if run.id in line]
    finally:
        watcher.stop()
    kinds = [line.split()[1] for line in lines]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished", lines
    assert kinds.count("node_started") == 3 and kinds.count("node_finished") == 3, lines
    started = next(line for line in lines if "node_started" in line and " train " in f"{line} ")
    assert "on cpu-a" in started and "attempt 1" in started
    assert any("node_finished" in line and "evaluate" in line and "ok on cpu-a" in line for line in lines)
    assert lines[0].split()[2:4] == [run.id, "metered"]
    assert "ok" in lines[-1].split()[3:]
    # Each line starts with the wall-clock time of the event, to the millisecond.
    assert all(len(line.split()[0]) == len("12:34:56.789") for line in lines)


def test_watch_run_follows_one_run_to_its_end_and_exits_with_its_status(cluster: Cluster, client: Client) -> None:
    other = client.submit(flows.gated, {"tag": "watch-other"})
    run = client.submit(flows.gated, {"tag": "watch-one"})
    wait_for_mark(cluster, "watch-one.started")
    watcher = Watcher(cluster, "--run", run.id[:12], "--timeout", "60")
    try:
        wait_for_subscribers(cluster, 1)
        (cluster.marks / "watch-other.go").write_text("go")
        assert other.wait(timeout=30).status is RunStatus.OK
        (cluster.marks / "watch-one.go").write_text("go")
        assert watcher.process.wait(30) == 0
        watcher._reader.join(5)
    finally:
        watcher.stop()
    assert watcher.lines and all(run.id in line for line in watcher.lines), watcher.lines  # only the run asked for
    assert "node_finished" in watcher.lines[0] and "wait_for_gate" in watcher.lines[0]
    assert "run_finished" in watcher.lines[-1]


def test_watch_run_of_an_ended_run_says_so_and_a_failed_one_exits_1(cluster: Cluster, client: Client) -> None:
    failed = client.submit(flows.broken).wait(timeout=60)
    assert failed.status is RunStatus.ERROR
    done = fluksio(cluster, "watch", "--run", failed.id)
    assert done.returncode == 1
    assert f"run {failed.id} (broken) has ended: error" in done.stderr and "bad batch 7" in done.stderr


def test_watch_json_prints_the_events_as_published(cluster: Cluster, client: Client) -> None:
    run = client.submit(flows.gated, {"tag": "watch-json"})
    wait_for_mark(cluster, "watch-json.started")
    watcher = Watcher(cluster, "--run", run.id, "--json", "--timeout", "60")
    try:
        wait_for_subscribers(cluster, 1)
        (cluster.marks / "watch-json.go").write_text("go")
        assert watcher.process.wait(30) == 0
        watcher._reader.join(5)
    finally:
        watcher.stop()
    events = [json.loads(line) for line in watcher.lines]
    assert [e["event"] for e in events] == ["node_finished", "run_finished"]
    assert events[0]["node"] == "wait_for_gate" and events[0]["machine"] == "cpu-a"
    assert events[-1]["status"] == "ok" and all(e["run_id"] == run.id for e in events)


def test_watch_and_flower_say_why_they_need_a_broker_in_the_embedded_default(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env["FLUKSIO_CONFIG"] = str(tmp_path / "none.toml")
    done = subprocess.run([*FLUKSIO, "watch"], cwd=tmp_path, env={**env, "COLUMNS": "300"}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "only visible inside the process running it" in done.stderr and "FLUKSIO_BROKER_URL" in done.stderr


# -- runs and show ---------------------------------------------------------------------------------


def test_runs_json_filters_by_flow_status_group_and_limit(cluster: Cluster, client: Client) -> None:
    sweep = client.sweep(flows.metered, {"lr": [0.1, 0.4]}, params={"steps": 4, "pause": 0.0})
    records = sweep.wait(timeout=60)
    assert {r.status for r in records} == {RunStatus.OK}
    failed = client.submit(flows.broken).wait(timeout=60)

    listed = json.loads(fluksio(cluster, "runs", "--group", sweep.group_id, "--json").stdout)
    assert sorted(r["id"] for r in listed) == sorted(r.id for r in records)
    assert {r["params"]["lr"]: r["metrics"]["loss"] for r in listed} == pytest.approx(
        {0.1: 1.1 * 0.95 ** 4, 0.4: 1.4 * 0.8 ** 4})
    errors = json.loads(fluksio(cluster, "runs", "--status", "error", "--json").stdout)
    assert failed.id in [r["id"] for r in errors] and {r["status"] for r in errors} == {"error"}
    only_metered = json.loads(fluksio(cluster, "runs", "--flow", "metered", "--limit", "1", "--json").stdout)
    assert len(only_metered) == 1 and only_metered[0]["flow"] == "metered"
    table = fluksio(cluster, "runs", "--group", sweep.group_id).stdout
    assert all(r.id in table for r in records) and "loss" in table


def test_show_lists_nodes_machines_errors_metrics_and_logs_on_request(cluster: Cluster, client: Client) -> None:
    ok = client.submit(flows.metered, {"lr": 0.5, "steps": 6, "pause": 0.0}).wait(timeout=60)
    shown = fluksio(cluster, "show", ok.id[:14])
    assert shown.returncode == 0, shown.stderr
    rows = {words[0]: words for words in map(cells, shown.stdout.splitlines())
            if words and words[0] in ("prepare", "train", "evaluate", "loss")}
    for node in ("prepare", "train", "evaluate"):
        assert rows[node][1:3] == ["ok", "cpu-a"], rows[node]
        assert rows[node][-1].endswith("s")  # the duration
    losses = [1.5 * 0.75 ** (k + 1) for k in range(6)]
    assert rows["loss"][1:] == ["6", f"{losses[-1]:.6g}", f"{min(losses):.6g}", f"{max(losses):.6g}"]

    failed = client.submit(flows.broken, {"batch": 9}).wait(timeout=60)
    shown = fluksio(cluster, "show", failed.id).stdout
    explode = next(line for line in shown.splitlines() if line.lstrip().startswith("explode"))
    assert "error" in explode and "cpu-a" in explode and "bad batch 9" in explode
    logs = fluksio(cluster, "show", failed.id, "--logs", "explode")
    assert "loading batch 9" in logs.stdout and "explode attempt 1 (error)" in logs.stdout
    missing = fluksio(cluster, "show", failed.id, "--logs", "nope")
    assert missing.returncode == 2 and "nodes: explode" in missing.stderr


def cells(line: str) -> list[str]:
    """The words of a table row, without rich's column separators."""
    return [word for word in line.split() if word != "│"]


# -- the live display of `fluksio run` -------------------------------------------------------------


def test_the_live_display_shows_what_runs_where_what_waits_and_why_and_the_latest_metrics(
        cluster: Cluster, client: Client) -> None:
    frames: list[str] = []
    activity = live.RunActivity()
    unsubscribe = client.subscribe(activity.observe)  # before submit: no event is missed
    try:
        other = client.submit(flows.gated, {"tag": "live-other"})
        wait_for_mark(cluster, "live-other.started")
        run = client.submit(flows.spread, {"width": 6, "pause": 0.5})
        activity.run_id = run.id
        (cluster.marks / "live-other.go").write_text("go")
        deadline = time.monotonic() + 60
        while not (record := client.get(run.id)).status.is_terminal() and time.monotonic() < deadline:
            frames.append(frame(live.progress_view(record, 8, client.series.newest(run.id), activity)))
            time.sleep(0.05)
    finally:
        unsubscribe()
    assert record.status is RunStatus.OK and other.wait(timeout=30).status is RunStatus.OK
    assert not any("wait_for_gate" in f for f in frames)  # another run's calls are not this run's
    busy = [f for f in frames if "▶ running" in f and "⏸ waiting" in f]
    assert busy, frames[-5:]
    # 8 nodes, 2 cpus: two run on cpu-a while the others wait, each with the placer's reason.
    running = [line for line in busy[0].splitlines() if "▶ running" in line]
    assert 1 <= len(running) <= 2 and all("on cpu-a" in line for line in running), busy[0]
    waiting = [line for line in busy[0].splitlines() if "⏸ waiting" in line]
    assert waiting and all(len(line.split()) > 4 for line in waiting), busy[0]  # a reason after the node name
    assert any(f.startswith("running") and "nodes done" in f for f in frames)
    metered = client.submit(flows.metered, {"lr": 0.5, "steps": 4, "pause": 0.0}).wait(timeout=60)
    final = frame(live.progress_view(metered, 3, client.series.newest(metered.id)))
    assert final.splitlines()[0].startswith("ok  3/3 nodes done")
    assert f"loss {1.5 * 0.75 ** 4:.4g} (step 3)" in final


def frame(renderable: object) -> str:
    console = Console(width=160, record=True, file=open(os.devnull, "w"), color_system=None)  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


# -- plot ------------------------------------------------------------------------------------------


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", data[:16]
    return struct.unpack(">II", data[16:24])


def test_plot_draws_one_line_per_run_into_a_png(cluster: Cluster, client: Client) -> None:
    sweep = client.sweep(flows.metered, {"lr": [0.2, 0.6]}, params={"steps": 12, "pause": 0.0})
    first, second = sweep.wait(timeout=60)
    out = cluster.workdir / "loss.png"
    done = fluksio(cluster, "plot", first.id, second.id[:14], "loss", "-o", str(out))
    if done.returncode == 2 and "not installed" in done.stderr and not in_ci():
        pytest.skip("matplotlib is not installed (pip install 'fluksio[plot]')")
    assert done.returncode == 0, done.stderr
    data = out.read_bytes()
    assert png_size(data) == (960, 540)  # 8 x 4.5 inches at 120 dpi
    assert 10_000 < len(data) < 2_000_000
    assert "2 run(s)" in done.stderr
    pil = pytest.importorskip("PIL.Image")  # matplotlib depends on pillow
    with pil.open(out) as image:
        colours = {colour for _count, colour in image.convert("RGB").getcolors(maxcolors=1_000_000)}
    # matplotlib's first two line colours: one line per run.
    assert (0x1F, 0x77, 0xB4) in colours and (0xFF, 0x7F, 0x0E) in colours

    grouped = cluster.workdir / "group.svg"
    done = fluksio(cluster, "plot", "loss", "--group", sweep.group_id, "-o", str(grouped))
    assert done.returncode == 0, done.stderr
    svg = grouped.read_text()
    assert svg.lstrip().startswith("<?xml") and "lr=0.2" in svg and "lr=0.6" in svg  # legend: what differs


def test_plot_names_the_metrics_a_run_has_when_asked_for_another(cluster: Cluster, client: Client) -> None:
    run = client.submit(flows.metered, {"lr": 0.3, "steps": 2, "pause": 0.0}).wait(timeout=60)
    done = fluksio(cluster, "plot", run.id, "accuracy", "-o", str(cluster.workdir / "x.png"))
    assert done.returncode == 2 and "no run named has a metric 'accuracy'" in " ".join(done.stderr.split())
    assert not (cluster.workdir / "x.png").exists()


def test_plot_without_matplotlib_says_how_to_install_it(cluster: Cluster, client: Client) -> None:
    run = client.submit(flows.metered, {"lr": 0.3, "steps": 2, "pause": 0.0}).wait(timeout=60)
    out = cluster.workdir / "never.png"
    # As if matplotlib were not installed: an import of it fails.
    code = ("import sys; sys.modules['matplotlib'] = None; sys.modules['matplotlib.figure'] = None; "
            "from fluksio.cli.main import main; sys.argv = ['fluksio', *sys.argv[1:]]; main()")
    done = subprocess.run([sys.executable, "-c", code, "plot", run.id, "loss", "-o", str(out)],
                          cwd=cluster.workdir, env={**cluster.env, "COLUMNS": "300"}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "pip install 'fluksio[plot]'" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
