"""The run explorer in a real headless Chromium (Selenium, Debian's chromedriver) on the embedded installation:
`fluksio ui` reads the SQLite store that this test process's runs are written to, as it would beside a
`fluksio run` in another terminal.

The runs page lists runs and follows them live, a run page draws a chart per metric, a sweep's comparison
marks the param that differs, and Cancel stops a running run. A screenshot of each page is kept under
test-artifacts/.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fluksio import Client, RunStatus, Settings, connect
from tests.integration.support import ui_flows as flows
from tests.integration.support.explorer import (
    UI_FLOWS,
    UiProcess,
    by_css,
    chromium,
    click,
    freeze,
    row_status,
    screenshot,
    settings_env,
    ui_env,
    wait_in,
)

pytestmark = pytest.mark.integration


@dataclass
class Setup:
    client: Client
    ui: UiProcess
    browser: Any

    def open(self, path: str) -> Any:
        self.browser.get(self.ui.url + path)
        return self.browser


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("ui-browser")
    env = settings_env(workdir)
    with pytest.MonkeyPatch.context() as patch, chromium() as browser:
        patch.setenv("TEST_FLUKSIO_MARKS", env["TEST_FLUKSIO_MARKS"])
        settings = Settings(database_url=env["FLUKSIO_DATABASE_URL"], artifacts_dir=Path(env["FLUKSIO_ARTIFACTS_DIR"]),
                            flows=[str(UI_FLOWS)], cpus=4, lease_interval_s=0.5)
        with connect(settings) as client:
            ui = UiProcess(workdir, ui_env(env)).wait_ready()
            try:
                yield Setup(client, ui, browser)
            finally:
                ui.stop()


def open_gate(tag: str) -> None:
    flows.gate(tag).parent.mkdir(parents=True, exist_ok=True)
    flows.gate(tag).touch()


def test_the_runs_page_lists_submitted_runs_and_follows_them_without_a_reload(setup: Setup) -> None:
    done = setup.client.submit(flows.curves, {"lr": 0.5, "steps": 4}).wait(timeout=60)
    held = setup.client.submit(flows.held, {"tag": "runs-page"})
    browser = setup.open("/")
    wait_in(browser, lambda b: row_status(b, done.id) == "ok" and row_status(b, held.id) in ("queued", "running"),
            what="both runs listed")
    browser.execute_script("window.fluksioSamePage = 42")  # gone if the page reloads
    later = setup.client.submit(flows.curves, {"lr": 0.6, "steps": 4})
    wait_in(browser, lambda b: row_status(b, later.id) is not None, what="a run submitted after the page loaded")
    open_gate("runs-page")
    assert held.wait(timeout=60).status is RunStatus.OK
    wait_in(browser, lambda b: row_status(b, held.id) == "ok", what="the held run shown ok once it finished")
    assert browser.execute_script("return window.fluksioSamePage") == 42
    freeze(browser)
    ids = [row.get_attribute("data-run") for row in by_css(browser, "tr[data-run]")]
    assert ids.index(later.id) < ids.index(held.id) < ids.index(done.id)  # newest first
    [metrics] = [row.find_element("css selector", "td.metrics").text for row in by_css(browser, "tr[data-run]")
                 if row.get_attribute("data-run") == done.id]
    assert "loss" in metrics and "accuracy" in metrics
    screenshot(browser, "explorer-runs")


def test_a_run_page_draws_one_chart_per_metric_with_the_emitted_points(setup: Setup) -> None:
    record = setup.client.submit(flows.curves, {"lr": 0.25, "steps": 12}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    emitted = setup.client.metrics(record.id)
    browser = setup.open(f"/runs/{record.id}")
    charts = wait_in(browser, lambda b: by_css(b, "svg.chart[data-x0]"), what="the charts")
    assert sorted(c.get_attribute("data-metric") for c in charts) == ["accuracy", "loss"] == sorted(emitted)
    for chart in charts:
        name = chart.get_attribute("data-metric")
        [line] = chart.find_elements("css selector", "g.series polyline.line")
        values = [float(v) for v in line.get_attribute("data-values").split()]
        steps = [int(s) for s in line.get_attribute("data-steps").split()]
        assert list(zip(steps, values)) == emitted[name]  # every emitted point, as emitted
        assert len(chart.find_elements("css selector", "circle.dot")) == 12
    # The values under the pointer.
    from selenium.webdriver.common.action_chains import ActionChains

    loss = next(c for c in charts if c.get_attribute("data-metric") == "loss")
    overlay = loss.find_element("css selector", "rect.overlay")
    ActionChains(browser).move_to_element_with_offset(overlay, -overlay.size["width"] // 2 + 2, 0).perform()
    tip = wait_in(browser, lambda b: b.find_element("id", "tooltip").is_displayed() and b.find_element("id", "tooltip"),
                  what="a tooltip")
    assert tip.text == f"loss · step 0: {round(emitted['loss'][0][1], 6):g}"
    # Zoom: drag across the middle third of the steps; the chart is drawn again for that range only.
    width = overlay.size["width"]
    ActionChains(browser).move_to_element_with_offset(overlay, -width // 6, 0).click_and_hold() \
        .move_by_offset(width // 3, 0).release().perform()
    box = wait_in(browser, lambda b: by_css(b, "figure.chart-box[data-zoomed]"), what="a zoomed chart")[0]
    zoomed = box.find_element("css selector", "svg.chart")
    low, high = float(zoomed.get_attribute("data-x0")), float(zoomed.get_attribute("data-x1"))
    assert 2 <= low < high <= 9, (low, high)
    drawn = [int(s) for s in zoomed.find_element("css selector", "polyline").get_attribute("data-steps").split()]
    assert drawn == [s for s in range(12) if low <= s <= high]
    [link] = by_css(browser, "#artifacts a.download")
    digest = record.result["model"]["$artifact"]["digest"]
    assert link.get_attribute("href") == f"{setup.ui.url}/api/artifacts/{digest}" and link.text == "model.txt"
    assert [r.get_attribute("data-node") for r in by_css(browser, "#nodes tr.call")] == ["prepare", "fit"]
    ActionChains(browser).move_to_element(by_css(browser, "h1")[0]).perform()  # the tooltip out of the picture
    screenshot(browser, "explorer-run")


def test_compare_of_a_three_run_sweep_highlights_the_differing_param(setup: Setup) -> None:
    sweep = setup.client.sweep(flows.curves, {"lr": [0.1, 0.2, 0.3]}, params={"steps": 6})
    assert all(r.status is RunStatus.OK for r in sweep.wait(timeout=90))
    browser = setup.open(f"/?group={sweep.group_id}")
    wait_in(browser, lambda b: len(by_css(b, "input.pick")) == 3, what="the group's three runs")
    freeze(browser)
    for box in by_css(browser, "input.pick"):
        box.click()
    by_css(browser, "#compare-selected")[0].click()
    wait_in(browser, lambda b: "/compare?runs=" in b.current_url, what="the comparison of the ticked runs")
    rows = {row.get_attribute("data-name"): row for row in by_css(browser, "#compare tbody tr")}
    assert "differs" in rows["lr"].get_attribute("class") and rows["lr"].get_attribute("data-differs") == "yes"
    for same in ("steps", "seed", "flow"):
        assert "differs" not in rows[same].get_attribute("class"), same
    assert sorted(td.text for td in rows["lr"].find_elements("css selector", "td")) == ["0.1", "0.2", "0.3"]
    assert rows["loss"].get_attribute("data-kind") == "metric"
    [chart] = by_css(browser, "svg.chart")
    labels = sorted(g.get_attribute("data-series") for g in chart.find_elements("css selector", "g.series"))
    assert labels == ["lr=0.1", "lr=0.2", "lr=0.3"]  # one line per run, named by what differs
    browser.get(setup.ui.url + f"/compare?group={sweep.group_id}")  # the same from the group itself
    assert {r.get_attribute("data-name") for r in by_css(browser, "#compare tr.differs")} == {"lr"}
    screenshot(browser, "explorer-compare")


def test_cancel_on_a_running_run_cancels_it(setup: Setup) -> None:
    held = setup.client.submit(flows.held, {"tag": "cancel-me"})
    browser = setup.open(f"/runs/{held.id}")
    wait_in(browser, lambda b: b.find_element("id", "run-status").text == "running", what="the run running")
    click(browser, 'button[data-action="cancel"]')
    wait_in(browser, lambda b: b.switch_to.alert, what="the confirmation").accept()
    wait_in(browser, lambda b: b.find_element("id", "run-status").text == "cancelled", timeout=60,
            what="the page showing the run cancelled")
    assert held.wait(timeout=10).status is RunStatus.CANCELLED
    screenshot(browser, "explorer-run-cancelled")
    # Resume it from the page: the explorer's process drives it now (embedded), and the page follows it again.
    open_gate("cancel-me")
    click(browser, 'button[data-action="resume"]')
    wait_in(browser, lambda b: b.switch_to.alert, what="the confirmation").accept()
    wait_in(browser, lambda b: b.find_element("id", "run-status").text == "ok", timeout=60,
            what="the page showing the resumed run ok")
    record = setup.client.get(held.id)
    assert record.status is RunStatus.OK and record.resume_count == 1


def test_the_machines_page_shows_this_process_s_machine(setup: Setup) -> None:
    browser = setup.open("/machines")
    [machine] = wait_in(browser, lambda b: by_css(b, "article.machine"), what="the machine")
    bars = {svg.get_attribute("data-kind"): svg for svg in machine.find_elements("css selector", "svg.usage")}
    assert set(bars) == {"cpus", "ram"} and bars["cpus"].get_attribute("data-total") == "2"
    assert "Embedded installation" in browser.find_element("css selector", "p.note").text
    navigation = [a.get_attribute("data-nav") for a in by_css(browser, "nav.top a[data-nav]")]
    assert navigation == ["runs", "compare", "machines"]
    screenshot(browser, "explorer-machines-embedded")


def test_a_mapped_node_s_elements_are_grouped_under_it_failed_first(setup: Setup) -> None:
    from fluksio.clock import utcnow
    from fluksio.store.ids import new_run_id
    from fluksio.store.models import Run
    from fluksio.store.nodes import NodeRow, record_nodes
    from fluksio.store.run_rows import insert_run

    db = setup.client._runtime.db
    parent = setup.client.submit(flows.curves, {"lr": 0.7, "steps": 2}).wait(timeout=60)
    now = utcnow()
    run = Run(id=new_run_id(), flow="shards", params={"n": 4}, params_digest="p", status="error", created_at=now,
              started_at=now, finished_at=now, duration_ms=10, engine="embedded", parent_id=parent.id,
              parent_node="trial[0]", status_reason="count[2] failed: bad shard 2")
    insert_run(db, run)
    child = new_run_id()
    # Rows as a mapped node's and a subflow's driver write them (the engine does not make them yet here).
    rows = [NodeRow(run_id=run.id, node="count", status="error" if i == 2 else "ok", element=i, machine="vm",
                    started_at=now, finished_at=now, duration_ms=5, error="ValueError: bad shard 2" if i == 2 else None)
            for i in range(4)]
    rows.append(NodeRow(run_id=run.id, node="trial", status="ok", child_run=child, machine="vm", started_at=now,
                        finished_at=now))
    record_nodes(db, rows)
    browser = setup.open(f"/runs/{run.id}")
    group = wait_in(browser, lambda b: by_css(b, 'tr.group[data-node="count"]'), what="the mapped node's row")[0]
    assert group.get_attribute("data-status") == "error" and "1 error · 3 ok" in group.text
    by_css(browser, "tr.elements summary")[0].click()
    elements = [r.get_attribute("data-node") for r in by_css(browser, "tr.elements tr.call")]
    assert elements == ["count[2]", "count[0]", "count[1]", "count[3]"]
    failed = by_css(browser, 'tr.elements tr.call[data-node="count[2]"]')[0]
    assert "bad shard 2" in failed.text and failed.get_attribute("data-status") == "error"
    assert by_css(browser, '#nodes tr[data-node="trial"] a.tag')[0].get_attribute("href").endswith(f"/runs/{child}")
    assert by_css(browser, "#parent-link")[0].get_attribute("href").endswith(f"/runs/{parent.id}")
    assert "count[2] failed" in browser.find_element("id", "status-reason").text
    browser.get(setup.ui.url + f"/runs/{parent.id}")
    assert [a.text for a in by_css(browser, "#children a")] == [run.id]  # and the parent lists its child
