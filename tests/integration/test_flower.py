"""`fluksio flower` against a real installation: redis-server, a `fluksio worker` with drivers, and a real
Flower process, looked at through Flower's REST API and through headless Chromium (Debian's package).

The screenshot of the tasks page is kept under test-artifacts/ for people to look at.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fluksio import RunStatus
from tests.integration.support import cluster_flows as flows
from tests.integration.support.cluster import Cluster, running_cluster
from tests.integration.support.flower import FlowerProcess, get, wait_consuming
from tests.integration.support.servers import need, need_module, proc_listeners

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
#: Chromium's flags on a root, headless, bus-less machine; the virtual-time budget lets Flower's page
#: fetch its table before the picture is taken (without it the page still says "Connecting...").
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
    "--virtual-time-budget=5000", "--window-size=1600,900",
]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need_module("flower", "pip install 'fluksio[flower]'")
    machines = {"cpu-a": ("--cpus", "2", "--gpus", "none", "--drivers")}
    with running_cluster(tmp_path_factory.mktemp("flower"), machines) as setup:
        yield setup


@pytest.fixture(scope="module")
def flower(cluster: Cluster) -> Iterator[FlowerProcess]:
    wait_consuming(cluster, {"nodes@cpu-a", "drivers@cpu-a"})
    process = FlowerProcess(cluster)
    try:
        yield process.wait_ready()
    finally:
        process.stop()


@pytest.fixture(scope="module")
def finished_run(cluster: Cluster, flower: FlowerProcess) -> str:
    """A run of `metered` made after Flower started (Flower lists only the tasks it has seen)."""
    with cluster.client() as client:
        record = client.submit(flows.metered, {"lr": 0.3}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    return record.id


def wait_for_tasks(flower: FlowerProcess, run_id: str, names: set[str], timeout: float = 30) -> dict[str, Any]:
    """Flower's tasks of ``run_id`` by name, once every one of ``names`` has succeeded."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = [t for t in flower.api("/api/tasks").values() if run_id in f"{t.get('args')}{t.get('kwargs')}"]
        by_name = {t["name"]: t for t in tasks}
        if all(by_name.get(n, {}).get("state") == "SUCCESS" for n in names) or time.monotonic() > deadline:
            return by_name
        time.sleep(0.2)


def test_flower_lists_the_workers(flower: FlowerProcess) -> None:
    deadline = time.monotonic() + 30
    while (workers := flower.api("/api/workers?refresh=1")).keys() < {"nodes@cpu-a", "drivers@cpu-a"}:
        assert time.monotonic() < deadline, f"Flower lists only {sorted(workers)}"
        time.sleep(0.5)
    # The node worker's pool is as large as the machine's cpus, and it consumes its <label>@<machine> queues.
    nodes = workers["nodes@cpu-a"]
    assert nodes["stats"]["pool"]["max-concurrency"] == 2
    assert {"default@cpu-a", "cpu-a@cpu-a"} <= {q["name"] for q in nodes["active_queues"]}


def test_node_calls_appear_under_flow_dot_node_with_their_run_id(flower: FlowerProcess, finished_run: str) -> None:
    names = {"metered.prepare", "metered.train", "metered.evaluate", "drive metered"}
    tasks = wait_for_tasks(flower, finished_run, names)
    assert names <= tasks.keys(), sorted(tasks)
    assert "fluksio.call" not in tasks and "fluksio.drive" not in tasks  # the generic names never show
    for node in ("prepare", "train", "evaluate"):
        call = tasks[f"metered.{node}"]
        assert call["state"] == "SUCCESS" and call["worker"] == "nodes@cpu-a"
        assert f"'run_id': '{finished_run}'" in call["kwargs"] and f"'node': '{node}'" in call["kwargs"]
    drive = tasks["drive metered"]
    assert drive["worker"] == "drivers@cpu-a" and finished_run in drive["args"]


def test_flower_listens_on_127_0_0_1_by_default(flower: FlowerProcess) -> None:
    listening = proc_listeners()
    if listening is None:
        pytest.skip("no /proc/net/tcp here")
    assert listening.get(flower.port) == {"127.0.0.1"}, listening.get(flower.port)


def test_the_tasks_page_shows_the_calls_and_a_screenshot_is_not_blank(flower: FlowerProcess,
                                                                      finished_run: str) -> None:
    chromium = need("chromium")
    need_module("PIL", "pip install pillow (matplotlib brings it)")
    from PIL import Image

    wait_for_tasks(flower, finished_run, {"metered.train"})
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "flower-tasks.png"
    shot.unlink(missing_ok=True)
    page = f"{flower.url}/tasks"
    dom = run_chromium(chromium, flower.workdir, "--dump-dom", page)
    # The page's table is filled by its own requests; the virtual-time budget lets them land.
    assert "metered.train" in dom and "drive metered" in dom, dom[-2000:]
    assert f"node=train attempt=1 run_id={finished_run}" in dom  # the compact kwargs column
    run_chromium(chromium, flower.workdir, f"--screenshot={shot}", page)
    data = shot.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000, len(data)
    with Image.open(shot) as image:
        assert image.size == (1600, 900)
        pixels = image.convert("RGB")
        colours = pixels.getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 100, "the screenshot has almost no colours: a blank page"
    background = max(count for count, _ in colours)
    assert background < 0.95 * 1600 * 900, "the screenshot is nearly all one colour: a blank page"


def run_chromium(chromium: str, workdir: Path, *args: str) -> str:
    profile = workdir / f"chromium-{time.monotonic_ns()}"
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_basic_auth_keeps_out_whoever_lacks_the_password(cluster: Cluster) -> None:
    guarded = FlowerProcess(cluster, "--basic-auth", "ada:s3cret", unauthenticated_api=False)
    try:
        guarded.wait_ready()
        assert get(f"{guarded.url}/workers")[0] == 401
        assert get(f"{guarded.url}/workers", auth=("ada", "wrong"))[0] == 401
        assert get(f"{guarded.url}/workers", auth=("ada", "s3cret"))[0] == 200
    finally:
        guarded.stop()


def test_flower_refuses_the_embedded_default_and_a_bad_basic_auth(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env["FLUKSIO_CONFIG"] = str(tmp_path / "none.toml")
    embedded = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "flower"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
    assert embedded.returncode == 2 and "FLUKSIO_BROKER_URL" in embedded.stderr
    assert "Traceback" not in embedded.stderr
    env["FLUKSIO_BROKER_URL"] = "redis://127.0.0.1:1/0"
    bad = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "flower", "--basic-auth", "nopassword"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "USER:PASSWORD" in bad.stderr
    # As if Flower were not installed: an import of it fails.
    code = "import sys; sys.modules['flower'] = None; from fluksio.cli.main import main; main()"
    missing = subprocess.run([sys.executable, "-c", code, "flower"], cwd=tmp_path, env={**env, "COLUMNS": "300"},
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "pip install 'fluksio[flower]'" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_late_task_sent_event_does_not_rename_a_call_back_to_the_generic_task() -> None:
    need_module("flower", "pip install 'fluksio[flower]'")
    from flower.events import EventsState

    from fluksio.worker.flower import _keep_shadow_names

    _keep_shadow_names()
    state = EventsState(max_tasks_in_memory=100)
    base = {"uuid": "R.train.1", "hostname": "nodes@cpu-a", "clock": 1, "local_received": time.time()}
    # The worker's events first, then the driver's late task-sent, as the two processes may deliver them.
    state.event({**base, "type": "task-received", "name": "flow.train", "args": "()",
                 "kwargs": "{'call': {'run_id': 'R'}}", "timestamp": time.time()})
    state.event({**base, "type": "task-succeeded", "result": "None", "runtime": 0.1, "timestamp": time.time()})
    state.event({**base, "hostname": "drivers@cpu-a", "type": "task-sent", "name": "fluksio.call",
                 "args": "()", "kwargs": "{'call': {'run_id': 'R'}}", "queue": "default@cpu-a",
                 "timestamp": time.time() - 1})
    task = state.tasks["R.train.1"]
    assert task.name == "flow.train" and task.state == "SUCCESS" and task.queue == "default@cpu-a"
