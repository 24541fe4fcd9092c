"""The run explorer in a real headless Chromium on a distributed installation: redis-server, two `fluksio worker`
processes (one with two GPU ids), `fluksio flower` and `fluksio ui --flower URL`.

The timeline shows a run's calls on both machines and links them to Flower, the machines page shows what runs
where and why a call waits, Cancel kills a call on a worker, and Flower serves the same pages under /fluksio/
with a link in its navigation. A screenshot of each page is kept under test-artifacts/.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from fluksio import Client, RunStatus
from tests.integration.support import cluster_flows as flows
from tests.integration.support.cluster import Cluster, running_cluster
from tests.integration.support.explorer import (
    UiProcess,
    by_css,
    chromium,
    click,
    freeze,
    http,
    row_status,
    screenshot,
    wait_in,
    wait_until,
)
from tests.integration.support.flower import FlowerProcess, wait_consuming
from tests.integration.support.servers import need_module

pytestmark = pytest.mark.integration

WAITING = "waiting for a worker labelled 'gpu' with 2 gpu(s) and 1 cpu(s) free"


@dataclass
class Setup:
    cluster: Cluster
    client: Client
    flower: FlowerProcess
    ui: UiProcess
    browser: Any

    def open(self, path: str) -> Any:
        self.browser.get(self.ui.url + path)
        return self.browser


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    need_module("flower", "pip install 'fluksio[flower]'")
    machines = {"cpu-a": ("--cpus", "2", "--gpus", "none", "--drivers"),
                "box-b": ("--labels", "gpu", "--cpus", "2", "--gpus", "0,1")}
    with running_cluster(tmp_path_factory.mktemp("ui-cluster"), machines) as cluster, chromium() as browser:
        wait_consuming(cluster, {"nodes@cpu-a", "drivers@cpu-a", "nodes@box-b"})
        flower = FlowerProcess(cluster)
        ui = None
        try:
            flower.wait_ready()
            ui = UiProcess(cluster.workdir, cluster.env, "--flower", flower.url).wait_ready()
            with cluster.client() as client:
                yield Setup(cluster, client, flower, ui, browser)
        finally:
            if ui is not None:
                ui.stop()
            flower.stop()


def test_the_timeline_shows_calls_on_two_machines_each_linked_to_flower(setup: Setup) -> None:
    record = setup.client.submit(flows.spread, {"width": 8, "pause": 0.5}).wait(timeout=90)
    assert record.status is RunStatus.OK, record.status_reason
    machines = {n.machine for n in record.nodes}
    assert machines == {"cpu-a", "box-b"}, machines  # 8 calls, 2 + 2 cpus: both machines ran some
    browser = setup.open(f"/runs/{record.id}")
    lanes = wait_in(browser, lambda b: by_css(b, "svg.timeline g.lane"), what="the timeline")
    by_lane = {lane.get_attribute("data-machine"): lane.find_elements("css selector", "g.call") for lane in lanes}
    assert set(by_lane) == {"cpu-a", "box-b"}
    drawn = {call.get_attribute("data-node"): machine for machine, calls in by_lane.items() for call in calls}
    assert drawn == {n.node: n.machine for n in record.nodes}  # each call in its machine's lane
    screenshot(browser, "explorer-timeline")
    # Each node call links to its task in Flower: the Celery task id is the call id.
    link = by_css(browser, '#nodes tr[data-node="work0"] a.flower-link')[0].get_attribute("href")
    call_id = f"{record.id}.work0.1"
    assert link == f"{setup.flower.url}/task/{call_id}"
    task = wait_until(lambda: (a := http("GET", f"{setup.flower.url}/api/task/info/{call_id}")).status == 200
                      and a.json(), 30, "Flower knowing the call")
    assert task["name"] == "spread.work0" and task["state"] == "SUCCESS"
    browser.get(link)
    wait_in(browser, lambda b: call_id in b.page_source and "spread.work0" in b.page_source,
            what="Flower's page of the call")


def test_the_machines_page_shows_calls_running_and_why_one_waits_and_cancel_stops_a_call(setup: Setup) -> None:
    client = setup.client
    first = client.submit(flows.hold_gpus, {"pause": 120.0})
    wait_until(lambda: any(m["name"] == "box-b" and m["calls"] for m in client.placement()["machines"]), 30,
               "the first run holding box-b's GPUs")
    second = client.submit(flows.hold_gpus, {"pause": 0.1})
    wait_until(lambda: any(w["run_id"] == second.id for w in client.placement()["waiting"]), 30,
               "the second run's call waiting")
    browser = setup.open("/machines")
    wait_in(browser, lambda b: by_css(b, f'#waiting tr[data-run="{second.id}"]'), what="the waiting call")
    freeze(browser)
    box = by_css(browser, 'article.machine[data-machine="box-b"]')[0]
    cells = {g.get_attribute("data-gpu"): g.get_attribute("class") for g in box.find_elements("css selector", "g.gpu")}
    assert cells == {"0": "gpu gpu-busy", "1": "gpu gpu-busy"}
    [call] = box.find_elements("css selector", "tr[data-call]")
    assert call.get_attribute("data-call") == f"{first.id}.hold.1" and first.id in call.text
    assert {m.get_attribute("data-machine") for m in by_css(browser, "article.machine")} == {"cpu-a", "box-b"}
    waiting = by_css(browser, f'#waiting tr[data-run="{second.id}"]')
    assert waiting[0].find_element("css selector", "td.why").text == WAITING
    assert waiting[0].get_attribute("data-node") == "hold"
    screenshot(browser, "explorer-machines")
    # Cancel the first run in its page: its call on box-b is killed, and the waiting one gets the GPUs.
    browser = setup.open(f"/runs/{first.id}")
    wait_in(browser, lambda b: by_css(b, '#nodes tr.running[data-node="hold"]'), what="the call shown running")
    click(browser, 'button[data-action="cancel"]')
    wait_in(browser, lambda b: b.switch_to.alert, what="the confirmation").accept()
    wait_in(browser, lambda b: b.find_element("id", "run-status").text == "cancelled", timeout=60,
            what="the page showing the run cancelled")
    assert first.wait(timeout=10).status is RunStatus.CANCELLED
    assert second.wait(timeout=60).status is RunStatus.OK
    wait_until(lambda: all(m["calls"] == 0 for m in client.placement()["machines"]), 30, "the machines idle")


def test_the_runs_page_follows_a_run_on_the_workers(setup: Setup) -> None:
    run = setup.client.submit(flows.gated, {"tag": "ui-runs"})
    browser = setup.open("/")
    wait_in(browser, lambda b: row_status(b, run.id) == "running", timeout=60, what="the run listed running")
    browser.execute_script("window.fluksioSamePage = 7")
    setup.cluster.marks.mkdir(parents=True, exist_ok=True)
    (setup.cluster.marks / "ui-runs.go").write_text("go")
    wait_in(browser, lambda b: row_status(b, run.id) == "ok", timeout=60, what="the run shown ok")
    assert browser.execute_script("return window.fluksioSamePage") == 7
    screenshot(browser, "explorer-runs-distributed")


def test_flower_serves_the_explorer_under_fluksio_linked_from_its_navigation(setup: Setup) -> None:
    latest = setup.client.runs(limit=1)[0]
    browser = setup.browser
    browser.get(setup.flower.url + "/workers")
    link = wait_in(browser, lambda b: by_css(b, 'nav a[data-fluksio="explorer"]'), what="the explorer's link")[0]
    assert link.get_attribute("href") == f"{setup.flower.url}/fluksio/"
    screenshot(browser, "flower-with-explorer-link")
    link.click()
    wait_in(browser, lambda b: row_status(b, latest.id) is not None, what="the runs, inside Flower")
    assert browser.current_url == f"{setup.flower.url}/fluksio/"
    flower_nav = by_css(browser, 'nav.top a[data-nav="flower"]')[0].get_attribute("href")
    assert flower_nav == f"{setup.flower.url}/"
    screenshot(browser, "explorer-in-flower")
    assert http("GET", f"{setup.flower.url}/fluksio/api/runs?limit=1").json()["runs"][0]["id"] == latest.id
    refused = http("POST", f"{setup.flower.url}/fluksio/api/runs/{latest.id}/cancel")
    assert refused.status == 403 and "_xsrf" in refused.json()["message"]
    assert http("GET", f"{setup.flower.url}/workers").status == 200  # Flower's own pages are as they were


def test_inside_a_flower_with_a_password_the_explorer_asks_for_it_too(setup: Setup) -> None:
    guarded = FlowerProcess(setup.cluster, "--basic-auth", "ada:s3cret", unauthenticated_api=False)
    try:
        guarded.wait_ready()
        for path in ("/fluksio/", "/fluksio/api/runs", "/fluksio/static/explorer.js", "/fluksio/nope"):
            assert http("GET", guarded.url + path).status == 401, path
            assert http("GET", guarded.url + path, auth=("ada", "wrong")).status == 401, path
        answer = http("GET", guarded.url + "/fluksio/api/runs?limit=1", auth=("ada", "s3cret"))
        assert answer.status == 200 and answer.json()["total"] >= 1
    finally:
        guarded.stop()
