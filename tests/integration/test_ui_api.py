"""The run explorer's JSON API against a real installation: `fluksio ui` as a user starts it, on the embedded
store that this test process's runs were written to, asked over plain HTTP.

Every endpoint, with good input and bad: unknown ids, malformed digests, filters out of range, POSTs without
the CSRF token or from another origin, and an address other hosts reach without a password.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fluksio import Artifact, Client, RunNotFound, RunStatus, Settings, connect
from fluksio.clock import utcnow
from fluksio.store.ids import new_run_id
from fluksio.store.models import Run
from fluksio.store.run_rows import insert_run
from tests.integration.support import ui_flows as flows
from tests.integration.support.explorer import UI_FLOWS, Answer, UiProcess, http, settings_env, ui_env, wait_until
from tests.integration.support.servers import proc_listeners

pytestmark = pytest.mark.integration


@dataclass
class Installation:
    workdir: Path
    env: dict[str, str]
    client: Client
    ui: UiProcess
    single: str
    sweep_group: str
    failed: str
    long: str
    parent: str
    #: Newest first (by id).
    children: list[str]


@pytest.fixture(scope="module")
def inst(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installation]:
    workdir = tmp_path_factory.mktemp("ui-api")
    env = settings_env(workdir)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TEST_FLUKSIO_MARKS", env["TEST_FLUKSIO_MARKS"])
        settings = Settings(database_url=env["FLUKSIO_DATABASE_URL"], artifacts_dir=Path(env["FLUKSIO_ARTIFACTS_DIR"]),
                            flows=[str(UI_FLOWS)], cpus=2, lease_interval_s=0.5)
        with connect(settings) as client:
            single = client.submit(flows.curves, {"lr": 0.1}).wait(timeout=60)
            sweep = client.sweep(flows.curves, {"lr": [0.2, 0.3, 0.4]})
            assert all(r.status is RunStatus.OK for r in sweep.wait(timeout=60))
            failed = client.submit(flows.failing, {"batch": 3}).wait(timeout=60)
            long = client.submit(flows.long_series, {"count": 5000}).wait(timeout=60)
            assert (single.status, failed.status, long.status) == (RunStatus.OK, RunStatus.ERROR, RunStatus.OK)
            # Child runs as a subflow's calls make them (the engine writes none yet): rows of their own.
            children = []
            for index in range(3):
                child = Run(id=new_run_id(), flow="curves", params={"lr": 0.1 * index}, params_digest="sha256:c",
                            status="ok", created_at=utcnow(), engine="embedded", parent_id=single.id,
                            parent_node=f"trial[{index}]")
                insert_run(client._runtime.db, child)
                children.append(child.id)
            ui = UiProcess(workdir, ui_env(env)).wait_ready()
            try:
                # Newest first is by id, which orders by the millisecond a run was made, not within one.
                yield Installation(workdir, env, client, ui, single.id, sweep.group_id, failed.id, long.id, single.id,
                                   sorted(children, reverse=True))
            finally:
                ui.stop()


def error(answer: Answer, status: int, *words: str) -> str:
    """The answer is a JSON error of ``status`` whose message says ``words``, and shows no traceback."""
    assert answer.status == status, (answer.status, answer.body[:500])
    assert answer.headers["Content-Type"].startswith("application/json")
    body = answer.json()
    assert body["status"] == status and isinstance(body["message"], str) and body["message"]
    for word in words:
        assert word in body["message"], body["message"]
    assert b"Traceback" not in answer.body and b'File "' not in answer.body
    return body["message"]


def cli(inst: Installation, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "fluksio.cli.main", *args], cwd=inst.workdir, env=ui_env(inst.env),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- GET /api/runs -------------------------------------------------------------------------------------


def test_runs_api_lists_runs_newest_first_as_fluksio_runs_json_does(inst: Installation) -> None:
    page = inst.ui.api("/api/runs?limit=100")
    listed = json.loads(cli(inst, "runs", "--json", "--limit", "100"))
    assert page["runs"] == listed  # the same entries, fields and newest values of each metric
    assert page["total"] == len(listed) == 9 and page["offset"] == 0 and page["limit"] == 100
    single = next(r for r in page["runs"] if r["id"] == inst.single)
    assert single["metrics"]["loss"] == pytest.approx(1.0 * 0.9 ** 11)


def test_runs_api_filters_and_pages(inst: Installation) -> None:
    assert {r["id"] for r in inst.ui.api("/api/runs?status=error")["runs"]} == {inst.failed}
    group = inst.ui.api(f"/api/runs?group={inst.sweep_group}")
    assert group["total"] == 3 and sorted(r["params"]["lr"] for r in group["runs"]) == [0.2, 0.3, 0.4]
    children = inst.ui.api(f"/api/runs?parent={inst.parent}")
    assert [r["id"] for r in children["runs"]] == inst.children
    assert [r["id"] for r in inst.ui.api(f"/api/runs?parent={inst.parent[:12]}")["runs"]] == inst.children
    assert inst.ui.api("/api/runs?flow=curves")["total"] == 7
    everything = [r["id"] for r in inst.ui.api("/api/runs?limit=100")["runs"]]
    paged = inst.ui.api("/api/runs?limit=2&offset=3")
    assert [r["id"] for r in paged["runs"]] == everything[3:5] and paged["total"] == 9
    assert inst.ui.api("/api/runs?flow=nope") == {"runs": [], "total": 0, "limit": 50, "offset": 0}


@pytest.mark.parametrize(("query", "words"), [
    ("status=finished", ("status 'finished' is not one of", "queued")),
    ("limit=0", ("limit must be from 1 to 1000",)),
    ("limit=ten", ("limit must be a whole number", "'ten'")),
    ("offset=-1", ("offset must be at least 0",)),
    ("offset=99999999999999999999", ("offset must be at least 0", "99999999999999999999")),
    ("flow=%ff", ("Invalid unicode",)),
])
def test_runs_api_refuses_bad_filters_with_400(inst: Installation, query: str, words: tuple[str, ...]) -> None:
    error(inst.ui.get(f"/api/runs?{query}"), 400, *words)


def test_runs_api_of_an_unknown_parent_is_404(inst: Installation) -> None:
    error(inst.ui.get("/api/runs?parent=01ZZZZZZZZZZ"), 404, "no run '01ZZZZZZZZZZ'")


# -- GET /api/runs/<id> -------------------------------------------------------------------------------


def test_run_api_is_fluksio_show_json_plus_artifacts_and_children(inst: Installation) -> None:
    body = inst.ui.api(f"/api/runs/{inst.single}")
    shown = json.loads(cli(inst, "show", inst.single, "--json"))
    assert {k: v for k, v in body.items() if k in shown} == shown
    assert set(body) - set(shown) == {"artifacts", "children", "running", "waiting", "code_files"}
    # The code the run shipped: the flows' file (by its path in the package) and what it imports of its tree.
    assert shown["code_entry"] == "tests.integration.support.ui_flows"
    paths = [f["path"] for f in body["code_files"]]
    assert "tests/integration/support/ui_flows.py" in paths and "tests/__init__.py" in paths
    assert all(f["size"] > 0 or f["path"].endswith("__init__.py") for f in body["code_files"])
    [model] = body["artifacts"]
    assert model["name"] == "model.txt" and model["node"] == "fit" and model["message"] == "model"
    assert model["digest"] == shown["result"]["model"]["$artifact"]["digest"]
    assert body["children"] == inst.children
    assert inst.ui.api(f"/api/runs/{inst.single[:14]}")["id"] == inst.single  # a unique prefix will do


@pytest.mark.parametrize("run_id", ["01ZZZZZZZZZZZZZZZZZZZZZZZZ", "nope", "0"])
def test_run_api_of_an_unknown_id_is_404_json(inst: Installation, run_id: str) -> None:
    error(inst.ui.get(f"/api/runs/{run_id}"), 404, f"no run {run_id!r}")
    error(inst.ui.get(f"/api/runs/{run_id}/metrics"), 404, f"no run {run_id!r}")


# -- GET /api/runs/<id>/metrics -----------------------------------------------------------------------


def test_metrics_api_gives_every_series_as_client_metrics_does(inst: Installation) -> None:
    body = inst.ui.api(f"/api/runs/{inst.single}/metrics")
    expected = inst.client.metrics(inst.single)
    assert set(body["series"]) == {"loss", "accuracy"} and body["points"] == 2000
    assert {name: [tuple(p) for p in points] for name, points in body["series"].items()} == expected
    assert body["sizes"] == {"accuracy": 12, "loss": 12}


def test_metrics_api_downsamples_each_series_keeping_each_bucket_s_min_and_max(inst: Installation) -> None:
    body = inst.ui.api(f"/api/runs/{inst.long}/metrics?points=100")
    points = body["series"]["signal"]
    assert len(points) <= 100 and body["sizes"] == {"signal": 5000}
    assert [2500, 1000.0] in points  # the one spike survives
    assert min(v for _, v in points) == 0.0 and max(v for _, v in points) == 1000.0
    assert [s for s, _ in points] == sorted(s for s, _ in points)
    ranged = inst.ui.api(f"/api/runs/{inst.long}/metrics?name=signal&start=100&end=199&points=1000")
    assert ranged["series"]["signal"] == [[s, float(s % 100)] for s in range(100, 200)]
    assert ranged["sizes"] == {"signal": 100}


@pytest.mark.parametrize(("query", "status", "words"), [
    ("points=1", 400, ("points must be from 2 to 100000",)),
    ("points=many", 400, ("points must be a whole number",)),
    ("start=9&end=3", 400, ("end (3) must not be before start (9)",)),
    ("start=99999999999999999999", 400, ("start must be at least 0",)),
    ("name=nope", 404, ("has no metric 'nope'", "signal")),
])
def test_metrics_api_refuses_bad_arguments(inst: Installation, query: str, status: int,
                                           words: tuple[str, ...]) -> None:
    error(inst.ui.get(f"/api/runs/{inst.long}/metrics?{query}"), status, *words)


# -- GET /api/machines --------------------------------------------------------------------------------


def test_machines_api_is_the_placement(inst: Installation) -> None:
    body = inst.ui.api("/api/machines")
    assert {"machines", "waiting", "provisioners"} <= set(body) and body["embedded"] is True
    [machine] = body["machines"]
    assert machine["total"]["cpus"] == 2 and machine["grants"] == [] and machine["calls"] == 0


# -- GET /api/artifacts/<digest> ----------------------------------------------------------------------


def test_artifacts_api_streams_the_bytes_of_a_digest_a_run_made(inst: Installation) -> None:
    digest = inst.client.get(inst.single).result["model"]["$artifact"]["digest"]
    answer = inst.ui.get(f"/api/artifacts/{digest}")
    assert answer.status == 200 and answer.body == b"weights lr=0.1"
    assert answer.headers["Content-Disposition"] == "attachment; filename*=UTF-8''model.txt"
    assert answer.headers["Content-Length"] == str(len(b"weights lr=0.1"))
    assert "sandbox" in answer.headers["Content-Security-Policy"]


@pytest.mark.parametrize("digest", [
    "sha256:..%2F..%2F..%2Fetc%2Fpasswd", "..%2F..%2Fetc%2Fpasswd", "sha256:" + "AB" * 32, "sha256:abc", "md5:00",
])
def test_artifacts_api_refuses_a_malformed_digest_before_touching_a_path(inst: Installation, digest: str) -> None:
    error(inst.ui.get(f"/api/artifacts/{digest}"), 400, "is not an artifact digest")


def test_artifacts_api_serves_only_digests_the_run_store_holds(inst: Installation) -> None:
    error(inst.ui.get("/api/artifacts/sha256:" + "0" * 64), 404, "no run made an artifact")
    # Bytes in the artifact store that no run made (put there by hand) are not served either.
    stray = inst.client._runtime.artifacts.put(Artifact.from_bytes(b"not from a run", name="x"))
    error(inst.ui.get(f"/api/artifacts/{stray.digest}"), 404, "no run made an artifact")


# -- POST /api/runs/<id>/cancel and /resume -----------------------------------------------------------


def test_cancel_and_resume_need_the_csrf_token_and_the_same_origin(inst: Installation) -> None:
    run = inst.client.submit(flows.held, {"tag": "api-cancel"})
    wait_until(lambda: run.status is RunStatus.RUNNING, 30, "the held run starting")
    path = f"/api/runs/{run.id}/cancel"
    token = inst.ui.xsrf()
    error(inst.ui.post(path), 403, "'_xsrf' argument missing")
    error(inst.ui.post(path, token="2|00000000|" + "0" * 32 + "|1", cookie=token), 403, "XSRF cookie does not match")
    error(inst.ui.post(path, token=token, Origin="http://evil.example"), 403, "from http://evil.example")
    error(inst.ui.post(path, token=token, **{"Sec-Fetch-Site": "cross-site"}), 403, "cross-site request")
    assert run.status is RunStatus.RUNNING  # none of those reached the run
    answer = inst.ui.post(path, token=token, Origin=inst.ui.url, **{"Sec-Fetch-Site": "same-origin"})
    assert answer.status == 200 and answer.json() == {"run_id": run.id, "status": "running"}  # told to stop
    record = run.wait(timeout=30)
    assert record.status is RunStatus.CANCELLED, record.status_reason
    error(inst.ui.post(path, token=token), 409, "already ended cancelled")
    # Resumed in the explorer's process (embedded: it drives the run itself), which then finishes it.
    flows.gate("api-cancel").parent.mkdir(parents=True, exist_ok=True)
    flows.gate("api-cancel").touch()
    resumed = inst.ui.post(f"/api/runs/{run.id}/resume", token=token)
    assert resumed.status == 200 and resumed.json()["run_id"] == run.id, resumed.body
    assert run.wait(timeout=60).status is RunStatus.OK
    error(inst.ui.post(f"/api/runs/{run.id}/resume", token=token), 409, "nothing to resume")


def test_state_changes_of_unknown_runs_and_wrong_methods(inst: Installation) -> None:
    token = inst.ui.xsrf()
    error(inst.ui.post("/api/runs/01ZZZZZZZZZZZZZZZZZZZZZZZZ/cancel", token=token), 404, "no run")
    error(inst.ui.get(f"/api/runs/{inst.single}/cancel"), 405)
    error(http("DELETE", inst.ui.url + "/api/runs"), 405)
    error(inst.ui.post("/api/runs", token=token), 405)


def test_unknown_paths_answer_json_404(inst: Installation) -> None:
    error(inst.ui.get("/no/such/page"), 404, "no page or API at /no/such/page")
    error(inst.ui.get("/100%25%20sure"), 404, "no page or API at /100%25%20sure")
    error(inst.ui.get(f"/api/runs/{inst.single}/bogus"), 404)
    error(inst.ui.get("/static/../../fluksio/settings.py"), 403)  # outside the static folder
    error(inst.ui.get("/static/nope.js"), 404)


def test_pages_answer_html_and_carry_the_timing_and_safety_headers(inst: Installation) -> None:
    for path in ("/", f"/runs/{inst.single}", f"/compare?group={inst.sweep_group}", "/machines"):
        answer = inst.ui.get(path)
        assert answer.status == 200 and answer.headers["Content-Type"].startswith("text/html"), path
        assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["Server-Timing"].startswith("app;dur=")
    error(inst.ui.get("/runs/01ZZZZZZZZZZZZZZZZZZZZZZZZ"), 404, "no run")
    error(inst.ui.get("/compare?runs=01ZZZZZZZZZZ"), 404, "no run")
    error(inst.ui.get("/?junk=%ff"), 400, "Invalid unicode in junk")  # any argument, even one the page ignores


def test_the_runs_page_suggests_every_flow_s_name_in_its_filter(inst: Installation) -> None:
    flow = inst.client.get(inst.single).flow
    assert f'<option value="{flow}">' in inst.ui.get("/").body.decode()


# -- where it listens, and who may ask ----------------------------------------------------------------


def test_it_listens_on_127_0_0_1_by_default(inst: Installation) -> None:
    listening = proc_listeners()
    if listening is None:
        pytest.skip("no /proc/net/tcp here")
    assert listening.get(inst.ui.port) == {"127.0.0.1"}, listening.get(inst.ui.port)


def ui_command(inst: Installation, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fluksio.cli.main", "ui", *args], cwd=inst.workdir,
                          env={**ui_env(inst.env), **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("args", "env", "words"), [
    (("--address", "0.0.0.0"), {}, ("without a password", "--basic-auth USER:PASSWORD", "FLUKSIO_UI_BASIC_AUTH")),
    (("--address", "::"), {}, ("without a password",)),
    (("--basic-auth", "ada"), {}, ("basic auth must be USER:PASSWORD",)),
    ((), {"FLUKSIO_UI_BASIC_AUTH": "ada:"}, ("basic auth must be USER:PASSWORD",)),
    (("--flower", "flower.local:5555"), {}, ("--flower must be Flower's http:// or https:// URL",)),
])
def test_it_refuses_to_start_as_asked_with_one_line_and_exit_2(inst: Installation, args: tuple[str, ...],
                                                                env: dict[str, str], words: tuple[str, ...]) -> None:
    done = ui_command(inst, "--port", "0", *args, **env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    message = " ".join(done.stderr.split())
    for word in words:
        assert word in message, message
    assert "Traceback" not in done.stderr


def test_another_address_with_a_password_asks_everyone_for_it(inst: Installation) -> None:
    guarded = UiProcess(inst.workdir, {**ui_env(inst.env), "FLUKSIO_UI_BASIC_AUTH": "ada:s3cret"},
                        "--address", "0.0.0.0")
    try:
        guarded.wait_ready()
        for path in ("/", "/api/runs", f"/api/runs/{inst.single}", "/static/explorer.css", "/no/such"):
            answer = http("GET", guarded.url + path)
            assert answer.status == 401 and answer.headers["WWW-Authenticate"].startswith("Basic"), path
            assert http("GET", guarded.url + path, auth=("ada", "wrong")).status == 401
        assert http("GET", guarded.url + "/api/runs", auth=("ada", "s3cret")).json()["total"] >= 9
        error(http("POST", guarded.url + f"/api/runs/{inst.single}/cancel"), 401, "user and password")
    finally:
        guarded.stop()


def test_client_runs_by_parent(inst: Installation) -> None:
    assert [r.id for r in inst.client.runs(parent=inst.parent)] == inst.children
    assert [r.id for r in inst.client.runs(parent=inst.parent, limit=1, offset=1)] == [inst.children[1]]
    with pytest.raises(RunNotFound):
        inst.client.runs(parent="01ZZZZZZZZZZZZ")


def test_without_tornado_it_says_how_to_install_it(inst: Installation) -> None:
    code = "import sys; sys.modules['tornado'] = None; from fluksio.cli.main import main; main()"
    done = subprocess.run([sys.executable, "-c", code, "ui"], cwd=inst.workdir,
                          env={**ui_env(inst.env), "COLUMNS": "300"}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "pip install 'fluksio[ui]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_in_use_is_one_line_and_exit_2(inst: Installation) -> None:
    done = ui_command(inst, "--port", str(inst.ui.port))
    assert done.returncode == 2 and f"cannot listen on 127.0.0.1:{inst.ui.port}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
