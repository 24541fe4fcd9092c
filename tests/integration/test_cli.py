"""The `fluksio` command driven as a subprocess, as a user at a terminal would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FLUKSIO = [sys.executable, "-m", "fluksio.cli.main"]


def fluksio(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env["COLUMNS"] = "200"
    return subprocess.run([*FLUKSIO, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_run_prints_the_result_and_exits_0_then_show_and_runs_find_it(tmp_path: Path) -> None:
    done = fluksio("run", str(REPO / "examples/hello.py"), "-p", "name=ada", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["status"] == "ok" and record["result"] == {"greeting": "hello, ADA!"}

    shown = fluksio("show", record["id"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "upper" in shown.stdout and "greet" in shown.stdout and "hello, ADA!" in shown.stdout

    listed = fluksio("runs", "--json", cwd=tmp_path)
    assert [r["id"] for r in json.loads(listed.stdout)] == [record["id"]]
    assert (tmp_path / ".fluksio" / "fluksio.db").is_file()


def test_run_and_sweep_record_the_priority_they_are_given(tmp_path: Path) -> None:
    done = fluksio("run", str(REPO / "examples/hello.py"), "-p", "name=ada", "--priority", "7", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["priority"] == 7
    (tmp_path / "swept.py").write_text(SWEPT)
    swept = fluksio("sweep", "swept.py:flow", "-g", "lr=0.1,0.01", "--seeds", "1", "--priority", "3", cwd=tmp_path)
    assert swept.returncode == 0, swept.stderr
    group = swept.stderr.split("group ")[1].split(":")[0].strip()
    assert [r["priority"] for r in json.loads(fluksio("runs", "--group", group, "--json", cwd=tmp_path).stdout)] == [
        3, 3]
    refused = fluksio("run", str(REPO / "examples/hello.py"), "-p", "name=ada", "--priority", "high", cwd=tmp_path)
    assert refused.returncode == 2 and "--priority" in refused.stderr and "Traceback" not in refused.stderr


def test_a_failing_run_exits_1_and_names_the_node(tmp_path: Path) -> None:
    (tmp_path / "failing.py").write_text(
        "from fluksio import Flow\n"
        "flow = Flow('failing')\n"
        "@flow.node(provides='x')\n"
        "def explode():\n"
        "    raise RuntimeError('kaboom')\n"
    )
    done = fluksio("run", "failing.py:flow", cwd=tmp_path)
    assert done.returncode == 1
    assert "explode" in done.stdout and "kaboom" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "nowhere.py"], "no flow file nowhere.py"),
        (["run", "HELLO", "-p", "name"], "expected NAME=VALUE, got 'name'"),
        (["run", "HELLO", "-p", "nme=x"], "'nme' is not an input of flow 'hello' (it declares: name)"),
        (["run", "no_such_module_xyz:flow"], "no module named 'no_such_module_xyz'"),
        (["show", "01ZZZZZZZZ"], "no run '01ZZZZZZZZ'"),
    ],
)
def test_bad_input_gets_one_clear_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    args = [str(REPO / "examples/hello.py") if a == "HELLO" else a for a in args]
    done = fluksio(*args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr


def test_a_flow_file_that_fails_to_import_shows_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("from fluksio import Flow\n\nimport json\nundefined_name + 1\n")
    done = fluksio("run", "broken.py", cwd=tmp_path)
    assert done.returncode == 2
    assert f"{tmp_path / 'broken.py'}:4" in done.stderr.replace("\n", "") and "NameError" in done.stderr


def test_a_cyclic_flow_is_refused_naming_the_cycle(tmp_path: Path) -> None:
    (tmp_path / "cycle.py").write_text(
        "from fluksio import Flow\n"
        "flow = Flow('cycle')\n"
        "@flow.node(provides='a')\n"
        "def one(b): return b\n"
        "@flow.node(provides='b')\n"
        "def two(a): return a\n"
    )
    done = fluksio("run", "cycle.py:flow", cwd=tmp_path)
    assert done.returncode == 2
    assert "has a cycle" in done.stderr and "one" in done.stderr and "two" in done.stderr


def test_demo_runs_and_show_presents_its_loss_and_model(tmp_path: Path) -> None:
    done = fluksio("demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rmse" in done.stdout and "model.json" in done.stdout
    assert "see it in a browser: fluksio ui, then open http://127.0.0.1:8585/" in done.stderr
    run_id = json.loads(fluksio("runs", "--json", cwd=tmp_path).stdout)[0]["id"]
    shown = fluksio("show", run_id, cwd=tmp_path).stdout
    assert "loss" in shown and "200" in shown  # 200 epochs, one loss step each
    assert "model.json" in shown and "sha256:" in shown
    logs = fluksio("show", run_id, "--logs", "fit", cwd=tmp_path)
    assert "fitted w=" in logs.stdout


SWEPT = (
    "from fluksio import Flow\n"
    "flow = Flow('swept', inputs={'lr': float, 'seed': int}, outputs=['score'])\n"
    "@flow.node(provides='score', streams=['loss'])\n"
    "def fit(lr, seed, emit):\n"
    "    emit('loss', lr + seed)\n"
    "    return lr * 10 + seed\n"
)


def test_sweep_runs_the_grid_and_runs_group_shows_params_and_final_metrics(tmp_path: Path) -> None:
    (tmp_path / "swept.py").write_text(SWEPT)
    done = fluksio("sweep", "swept.py:flow", "-g", "lr=0.1,0.01", "--seeds", "1,2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    group = done.stderr.split("group ")[1].split(":")[0].strip()
    listed = json.loads(fluksio("runs", "--group", group, "--json", cwd=tmp_path).stdout)
    assert sorted((r["params"]["lr"], r["params"]["seed"]) for r in listed) == [(0.01, 1), (0.01, 2), (0.1, 1),
                                                                                  (0.1, 2)]
    assert {r["group_id"] for r in listed} == {group}
    assert sorted(r["metrics"]["loss"] for r in listed) == [1.01, 1.1, 2.01, 2.1]
    table = fluksio("runs", "--group", group, cwd=tmp_path).stdout
    assert "loss" in table and "2.01" in table and '"lr": 0.01' in table


def test_artifact_get_writes_the_bytes_and_refuses_a_bad_digest(tmp_path: Path) -> None:
    done = fluksio("demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads(fluksio("runs", "--json", cwd=tmp_path).stdout)[0]
    digest = record["result"]["model"]["$artifact"]["digest"]
    got = fluksio("artifact", "get", digest, "-o", "model.json", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert set(json.loads((tmp_path / "model.json").read_text())) == {"w", "b"}
    bad = fluksio("artifact", "get", "sha256:../../etc/passwd", "-o", "x", cwd=tmp_path)
    assert bad.returncode == 2 and "is not an artifact digest" in bad.stderr
    assert not (tmp_path / "x").exists()


def test_no_cache_runs_every_node_again(tmp_path: Path) -> None:
    first = json.loads(fluksio("run", str(REPO / "examples/hello.py"), "--json", cwd=tmp_path).stdout)
    cached = json.loads(fluksio("run", str(REPO / "examples/hello.py"), "--json", cwd=tmp_path).stdout)
    fresh = json.loads(fluksio("run", str(REPO / "examples/hello.py"), "--json", "--no-cache", cwd=tmp_path).stdout)
    assert {n["status"] for n in cached["nodes"]} == {"cached"}
    assert {n["cached_from"] for n in cached["nodes"]} == {first["id"]}
    assert {n["status"] for n in fresh["nodes"]} == {"ok"}


def test_run_timeout_stops_waiting_cleanly(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(
        "import time\nfrom fluksio import Flow\nflow = Flow('slow')\n"
        "@flow.node(provides='x')\ndef nap():\n    time.sleep(5)\n    return 1\n")
    done = fluksio("run", "slow.py:flow", "--timeout", "0.5", cwd=tmp_path)
    assert done.returncode == 124
    assert "timed out" in done.stderr and "abandoned" in done.stderr and "Traceback" not in done.stderr


def test_the_folds_example_maps_over_k_folds_and_show_folds_the_elements_into_one_line(tmp_path: Path) -> None:
    done = fluksio("run", str(REPO / "examples/folds.py"), "-p", "k=4", "--seed", "1", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert len(record["result"]["scores"]) == 4 and record["result"]["report"].startswith("published")
    assert sorted(n["index"] for n in record["nodes"] if n["node"] == "train_fold") == [0, 1, 2, 3]
    shown = fluksio("show", record["id"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    line = next(row for row in shown.stdout.splitlines() if row.strip().startswith("train_fold"))
    assert "4/4 ok" in line
    assert {f"loss[{i}]" for i in range(4)} <= set(shown.stdout.split())
    refused = fluksio("run", str(REPO / "examples/folds.py"), "-p", "k=4", "-p", "threshold=0.1", "--seed", "1",
                      "--json", cwd=tmp_path)
    assert refused.returncode == 0, refused.stderr  # a branch skipped by its condition is a good run
    assert json.loads(refused.stdout)["result"]["report"].startswith("not published")


def test_show_lists_the_failed_elements_of_a_mapped_node_and_logs_takes_one_element(tmp_path: Path) -> None:
    (tmp_path / "partly.py").write_text(
        "from fluksio import Flow\n"
        "flow = Flow('partly', inputs={'xs': list[int]})\n"
        "@flow.node(provides='ys', map={'x': 'xs'})\n"
        "def check(x):\n"
        "    print(f'checking {x}')\n"
        "    if x % 5 == 3:\n"
        "        raise ValueError(f'bad {x}')\n"
        "    return x\n"
    )
    done = fluksio("run", "partly.py:flow", "-p", "xs=[0,1,2,3,4,5,6,7,8,9]", "--json", cwd=tmp_path)
    assert done.returncode == 1
    run_id = json.loads(done.stdout)["id"]
    shown = fluksio("show", run_id, cwd=tmp_path)
    lines = shown.stdout.splitlines()
    summary = next(row for row in lines if row.strip().startswith("check "))
    assert "8/10 ok, 2 error" in summary and "failed: check[3], check[8]" in summary
    assert any(row.strip().startswith("check[3]") and "ValueError: bad 3" in row for row in lines)
    logs = fluksio("show", run_id, "--logs", "check[8]", cwd=tmp_path)
    assert logs.returncode == 0 and "checking 8" in logs.stdout and "checking 3" not in logs.stdout


def test_the_search_example_runs_its_trials_as_child_runs_listed_with_parent(tmp_path: Path) -> None:
    done = fluksio("run", f"{REPO / 'examples/search.py'}:search", "-p", "n=3", "-p", "epochs=20", "--seed", "2",
                   "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    best = record["result"]["best"]
    assert set(best) == {"lr", "accuracy", "weights"} and best["lr"] in (0.001, 0.02236, 0.5)
    children = json.loads(fluksio("runs", "--parent", record["id"], "--json", cwd=tmp_path).stdout)
    assert sorted(c["parent_node"] for c in children) == ["trial[0]", "trial[1]", "trial[2]"]
    assert {c["flow"] for c in children} == {"train"} and {c["parent_id"] for c in children} == {record["id"]}
    trials = {n["index"]: n["child_run"] for n in record["nodes"] if n["node"] == "trial"}
    assert set(trials.values()) == {c["id"] for c in children}
    shown = fluksio("show", children[0]["id"], cwd=tmp_path)
    assert f"child of {record['id']}" in shown.stdout and "loss" in shown.stdout


def test_the_daily_loop_run_show_code_get_and_run_an_earlier_package_again(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "helpers.py").write_text("FACTOR = 3\n")
    (project / "flows.py").write_text(
        "from fluksio import Flow\n"
        "import helpers\n"
        "scaled = Flow('scaled', inputs={'x': int}, outputs=['y'])\n"
        "@scaled.node(provides='y')\n"
        "def times(x):\n"
        "    return x * helpers.FACTOR\n"
    )
    first = fluksio("run", str(project / "flows.py"), "-p", "x=2", "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    record = json.loads(first.stdout)
    assert record["result"] == {"y": 6} and record["code_entry"] == "flows.py"

    shown = fluksio("show", record["id"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"code {record['code_digest']} · runs flows.py · 2 file(s)\n  flows.py  " in shown.stdout
    assert "\n  helpers.py  11 B\n" in shown.stdout

    (project / "helpers.py").write_text("FACTOR = 10\n")  # edited after the run
    got = fluksio("code", "get", record["id"], "-o", str(tmp_path / "ran"), cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["flows.py", "helpers.py"]
    assert (tmp_path / "ran" / "helpers.py").read_text() == "FACTOR = 3\n"  # what ran, not what is there now
    assert (tmp_path / "ran" / "flows.py").read_bytes() == (project / "flows.py").read_bytes()
    again = fluksio("code", "get", record["id"], "-o", str(tmp_path / "ran"), cwd=tmp_path)
    assert again.returncode == 2 and "is not an empty folder" in again.stderr

    edited = fluksio("run", str(project / "flows.py"), "-p", "x=2", "--json", cwd=tmp_path)
    assert json.loads(edited.stdout)["result"] == {"y": 20}, edited.stderr
    rerun = fluksio("run", "scaled", "--code", record["code_digest"], "-p", "x=5", "--json", "--no-cache",
                    cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["result"] == {"y": 15}  # FACTOR 3: the earlier package, unchanged
    unknown = fluksio("run", "scaled", "--code", "sha256:" + "0" * 64, cwd=tmp_path)
    assert unknown.returncode == 2 and "no run of flow 'scaled' shipped code package" in unknown.stderr
