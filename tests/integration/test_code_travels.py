"""Code travels with the run (#32), end to end with real processes: redis-server, PostgreSQL, the shared folder
artifact store and `fluksio worker`s that never loaded the flow (their working folders hold no copy of it, and
their own FLUKSIO_FLOWS is another flow with a ``helpers`` module of the same name).

This test process is the submitter: it loads a project folder of its own as ``fluksio run flows.py:travels``
does — a flow importing a helper module and a subflow's module, reading a data file its ``include=`` ships,
with a mapped node and a node that holds until the test drops a mark — edits the helper between submits, and
checks what each run ran, where, from which package, and what the installation refuses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from fluksio import Client, RunRejected, RunStatus, Settings, connect
from fluksio.artifacts.artifact import Artifact
from fluksio.client import RunHandle
from fluksio.flows.flow import Flow
from fluksio.flows.package import pack
from fluksio.flows.registry import load_flows
from fluksio.schemas import RunRecord
from tests.integration.support.cluster import Cluster
from tests.integration.support.package_flows import RESIDENT_FLOW, write_tree
from tests.integration.support.servers import PostgresServer, RedisServer, wait_for

pytestmark = pytest.mark.integration

#: The workers that run shipped code (box1 also drives runs); a third, registered-only one joins in one test.
BOXES = ("box1", "box2")
ITEMS = [1, 2, 3]
#: The project's modules, forgotten around every load so that the next load reads the files as they are then.
PROJECT_MODULES = ("helpers", "sub")
#: What `fluksio code get` must write for a run of the project, and nothing else.
PACKED = ["configs/settings.json", "flows.py", "helpers.py", "sub.py"]
SETTINGS_JSON = '{"factor": 10, "label": "read from configs/settings.json"}\n'

FLOW = '''
"""The project's flow: a helper's constant, a data file, a mapped node, a subflow, and a node that holds."""
import json
import os
import time
from pathlib import Path

import helpers
from fluksio import Flow
from sub import scoring

MARKS = Path({marks!r})
MARKS.mkdir(parents=True, exist_ok=True)
(MARKS / f"imported.travels.{{os.getpid()}}").write_text(helpers.CONSTANT)

travels = Flow("travels", inputs={{"tag": str, "items": list[int]}},
               outputs=["constant", "settings", "scaled", "total", "held"], include=["configs/*.json"])


def ancestors():
    pids, pid = [], os.getpid()
    while pid > 1:
        pids.append(pid)
        pid = int(Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return pids


@travels.node(provides="constant")
def read_constant():
    return helpers.CONSTANT


@travels.node(provides="settings")
def read_settings():
    return json.loads((Path(__file__).parent / "configs" / "settings.json").read_text())


@travels.node(provides="scaled", map={{"item": "items"}})
def scale(item, settings):
    return helpers.tagged(item * settings["factor"])


travels.subflow(scoring, name="score")


@travels.node(provides="held", timeout_s=120)
def hold(tag):
    (MARKS / f"holding.{{tag}}.{{os.getpid()}}").write_text("")
    while not (MARKS / f"release.{{tag}}").exists():
        time.sleep(0.02)
    return {{"constant": helpers.CONSTANT, "ancestors": ancestors()}}
'''

SUB = '''
import helpers
from fluksio import Flow

scoring = Flow("scoring", inputs={"scaled": list[str]}, outputs=["total"])


@scoring.node(provides="total")
def total(scaled):
    return f"{helpers.CONSTANT} scored {len(scaled)}: " + " ".join(scaled)
'''


def helper_text(constant: str) -> str:
    return f'CONSTANT = {constant!r}\n\n\ndef tagged(value):\n    return f"{{CONSTANT}}:{{value}}"\n'


def expected_result(constant: str) -> dict[str, object]:
    scaled = [f"{constant}:{item * 10}" for item in ITEMS]
    return {"constant": constant, "settings": json.loads(SETTINGS_JSON), "scaled": scaled,
            "total": f"{constant} scored 3: " + " ".join(scaled)}


def write_project(folder: Path, marks: Path) -> Path:
    """The project: its flow, helper, subflow module and data file, and what must never travel with them."""
    (folder / "configs").mkdir(parents=True)
    (folder / "flows.py").write_text(textwrap.dedent(FLOW).format(marks=str(marks)))
    (folder / "sub.py").write_text(textwrap.dedent(SUB))
    (folder / "helpers.py").write_text(helper_text("old"))
    (folder / "configs" / "settings.json").write_text(SETTINGS_JSON)
    (folder / "configs" / ".hidden.json").write_text('{"dot": "files never travel"}\n')
    (folder / "configs" / "readme.txt").write_text("not matched by include=\n")
    (folder / "notes.md").write_text("not imported, not included: never packed\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "helpers.cpython-312.pyc").write_bytes(b"\x00stale bytecode")
    return folder / "flows.py"


def forget_project_modules() -> None:
    for name in list(sys.modules):
        if name in PROJECT_MODULES or name.startswith("fluksio_flowfile_"):
            del sys.modules[name]


def load(reference: str) -> Flow:
    """The flow ``path/file.py:attr`` names, loaded as `fluksio run` loads it, from the files as they are now."""
    forget_project_modules()
    try:
        [flow] = load_flows(reference)
    finally:
        forget_project_modules()
    return flow


def marks_of_others(marks: Path, pattern: str) -> list[str]:
    """The marks matching ``pattern`` (``<what>.<pid>``) left by processes other than this test's."""
    return sorted(m.name for m in marks.glob(pattern) if m.suffix != f".{os.getpid()}")


def wait_for_hold(client: Client, handle: RunHandle, marks: Path, tag: str) -> None:
    """Until the run's hold node runs (its mark is there); fails at once if the run ended instead."""
    def holding() -> bool:
        if list(marks.glob(f"holding.{tag}.*")):
            return True
        status = handle.status
        if status.is_terminal():
            record = client.get(handle.id)
            raise AssertionError(f"run {handle.id} ended {status.value} before its hold node ran: "
                                 f"{record.status_reason}, {[(n.node, n.error) for n in record.nodes]}")
        return False

    wait_for(holding, timeout=90, what=f"the hold node of run {handle.id} ({tag})")


def called_rows(client: Client, record: RunRecord) -> list[tuple[str, str | None, str | None]]:
    """(node, machine, cached_from) of every call of the run and of its child runs."""
    rows = [(n.node, n.machine, n.cached_from) for n in record.nodes if n.child_run is None]
    for child in client.runs(parent=record.id):
        rows += [(f"{child.flow}.{n.node}", n.machine, n.cached_from) for n in client.get(child.id).nodes]
    return rows


def assert_ok(record: RunRecord) -> None:
    assert record.status is RunStatus.OK, (record.status_reason, [(n.node, n.error) for n in record.nodes])


def result_of(record: RunRecord) -> dict[str, Any]:
    assert record.result is not None, record.status_reason
    return record.result


def machine_of(record: RunRecord, node: str) -> str:
    [row] = [n for n in record.nodes if n.node == node]
    assert row.machine in BOXES, row
    return row.machine


# -- the installation ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer) -> Iterator[Cluster]:
    """redis-server, a PostgreSQL run store, and box1 (also a driver) and box2 accepting any shipped code,
    each in an empty working folder; their FLUKSIO_FLOWS is a resident flow with a ``helpers`` of its own."""
    workdir = tmp_path_factory.mktemp("travels")
    resident = write_tree(workdir / "resident", RESIDENT_FLOW, "the worker's")
    server = RedisServer(workdir / "redis").start()
    setup = Cluster(workdir, server, postgres.new_database(), env={"FLUKSIO_FLOWS": str(resident)})
    setup.marks.mkdir()
    try:
        for name in BOXES:
            (workdir / name).mkdir()
            flags = ("--drivers",) if name == "box1" else ()
            setup.start_worker(name, "--cpus", "2", "--gpus", "none", *flags, "--accept-code", "any",
                               cwd=workdir / name)
        setup.wait_attached(*BOXES)
        yield setup
    finally:
        setup.stop_all()
        server.stop()


@pytest.fixture(scope="module")
def worker_processes(cluster: Cluster) -> dict[str, tuple[subprocess.Popen[bytes], int]]:
    """Each box's process as started (its Popen and pid), to tell later that none was restarted."""
    return {name: (cluster.workers[name], cluster.workers[name].pid) for name in BOXES}


def settings_of(cluster: Cluster, **over: Any) -> Settings:
    """The installation's settings for a client here; it registers no flow of its own."""
    return Settings(broker_url=cluster.env["FLUKSIO_BROKER_URL"], database_url=cluster.env["FLUKSIO_DATABASE_URL"],
                    artifacts_dir=cluster.env["FLUKSIO_ARTIFACTS_DIR"], flows=[], heartbeat_interval_s=0.5,
                    heartbeat_ttl_s=2, lease_interval_s=1, **over)


@pytest.fixture(scope="module")
def client(cluster: Cluster, worker_processes: dict[str, tuple[subprocess.Popen[bytes], int]]) -> Iterator[Client]:
    """The submitter (it comes after ``worker_processes``, so that those are the processes as first started)."""
    with pytest.MonkeyPatch.context() as env:  # no FLUKSIO_* of the developer's, no fluksio.toml here
        for key in [k for k in os.environ if k.startswith("FLUKSIO_")]:
            env.delenv(key)
        env.setenv("FLUKSIO_CONFIG", str(cluster.workdir / "none.toml"))
        connected = connect(settings_of(cluster))
    try:
        yield connected
    finally:
        connected.close()


@pytest.fixture(scope="module")
def project(cluster: Cluster) -> Path:
    return write_project(cluster.workdir / "project", cluster.marks)


# -- the runs the tests look at -----------------------------------------------------------------------------------


@dataclass
class FirstRun:
    record: RunRecord
    flow: Flow
    #: The project's files as they were for this run, by path in the package.
    files: dict[str, bytes]


@dataclass
class Overlapping:
    old: RunRecord
    new: RunRecord
    #: Each run's status while both hold nodes were holding.
    both_running: tuple[RunStatus, RunStatus]


@pytest.fixture(scope="module")
def first_run(client: Client, project: Path, cluster: Cluster) -> FirstRun:
    """A run of the project as first written (helper constant "old")."""
    flow = load(f"{project}:travels")
    files = {path: (project.parent / path).read_bytes() for path in PACKED}
    (cluster.marks / "release.first").write_text("")
    record = client.submit(flow, {"tag": "first", "items": ITEMS}).wait(timeout=120)
    assert_ok(record)
    return FirstRun(record, flow, files)


@pytest.fixture(scope="module")
def overlapping(client: Client, project: Path, cluster: Cluster, first_run: FirstRun) -> Overlapping:
    """A run of the old code holding, the helper edited, the new code submitted and holding too; then both let go."""
    old = client.submit(first_run.flow, {"tag": "a", "items": ITEMS})
    wait_for_hold(client, old, cluster.marks, "a")
    (project.parent / "helpers.py").write_text(helper_text("new"))
    new = client.submit(load(f"{project}:travels"), {"tag": "b", "items": ITEMS})
    wait_for_hold(client, new, cluster.marks, "b")
    both_running = (old.status, new.status)
    (cluster.marks / "release.a").write_text("")
    (cluster.marks / "release.b").write_text("")
    return Overlapping(old.wait(timeout=120), new.wait(timeout=120), both_running)


# -- the tests ----------------------------------------------------------------------------------------------------


def test_the_flow_runs_on_workers_that_never_loaded_it_from_its_package(
        client: Client, cluster: Cluster, project: Path, first_run: FirstRun,
        worker_processes: dict[str, tuple[subprocess.Popen[bytes], int]]) -> None:
    record, flow = first_run.record, first_run.flow
    assert {k: v for k, v in result_of(record).items() if k != "held"} == expected_result("old")
    assert result_of(record)["held"]["constant"] == "old"
    package = pack(str(project), flow.include, flow.module)
    assert record.code_digest == package.digest and record.code_entry == "flows.py"
    assert sorted(f.path for f in package.files) == PACKED
    # Every call ran on the two boxes, none from a cache (nothing ran this code before).
    rows = called_rows(client, record)
    assert {node for node, _, _ in rows} == {"read_constant", "read_settings", "scale", "hold", "scoring.total"}
    assert len([row for row in rows if row[0] == "scale"]) == len(ITEMS)
    assert all(machine in BOXES and cached is None for _, machine, cached in rows), rows
    # The hold call was a process below the worker that ran it.
    assert worker_processes[machine_of(record, "hold")][1] in result_of(record)["held"]["ancestors"]
    # The subflow's child run ran from its parent's package.
    [child] = client.runs(parent=record.id)
    assert child.flow == "scoring" and child.status is RunStatus.OK
    assert child.code_digest == record.code_digest and child.code_entry == "flows.py"
    # The package was imported on the workers (in processes not this one), and unpacked in their code caches.
    imported = marks_of_others(cluster.marks, "imported.travels.*")
    assert imported and all((cluster.marks / m).read_text() == "old" for m in imported)
    folder = "sha256-" + package.digest.removeprefix("sha256:")
    caches = [cluster.workdir / name / ".fluksio" / "code" / folder / "files" for name in BOXES]
    held = [cache for cache in caches if cache.is_dir()]
    assert held, f"no worker unpacked {folder}"
    for cache in held:
        assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()) == PACKED
        assert (cache / "helpers.py").read_bytes() == first_run.files["helpers.py"]


def test_an_edited_helper_runs_beside_the_old_code_on_the_same_workers(
        client: Client, cluster: Cluster, first_run: FirstRun, overlapping: Overlapping,
        worker_processes: dict[str, tuple[subprocess.Popen[bytes], int]]) -> None:
    old, new = overlapping.old, overlapping.new
    assert overlapping.both_running == (RunStatus.RUNNING, RunStatus.RUNNING)
    assert_ok(old)
    assert_ok(new)
    assert old.code_digest == first_run.record.code_digest != new.code_digest
    assert {k: v for k, v in result_of(old).items() if k != "held"} == expected_result("old")
    assert {k: v for k, v in result_of(new).items() if k != "held"} == expected_result("new")
    assert result_of(old)["held"]["constant"] == "old" and result_of(new)["held"]["constant"] == "new"
    # The same worker processes ran both: alive, never restarted, and ancestors of both hold calls.
    pids = {}
    for name, (process, pid) in worker_processes.items():
        assert cluster.workers[name] is process and process.poll() is None, cluster.log_of(name)
        pids[name] = pid
    for record in (old, new):
        assert pids[machine_of(record, "hold")] in result_of(record)["held"]["ancestors"]
    # The old code's run took what it could from the first run's cache; the new code's took nothing.
    old_rows = {node: cached for node, _, cached in called_rows(client, old)}
    assert old_rows["read_constant"] == first_run.record.id and old_rows["hold"] is None
    new_rows = called_rows(client, new)
    assert {node for node, _, _ in new_rows} == {"read_constant", "read_settings", "scale", "hold", "scoring.total"}
    assert all(machine in BOXES and cached is None for _, machine, cached in new_rows), new_rows


def test_code_get_writes_exactly_the_files_each_run_ran(
        cluster: Cluster, project: Path, first_run: FirstRun, overlapping: Overlapping) -> None:
    now = {path: (project.parent / path).read_bytes() for path in PACKED}
    assert now["helpers.py"] != first_run.files["helpers.py"]  # edited since the first run
    for record, files, folder in ((first_run.record, first_run.files, "got-first"), (overlapping.new, now, "got-new")):
        into = cluster.workdir / folder
        done = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "code", "get", record.id, "-o", str(into)],
                              env=cluster.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == PACKED
        assert f"wrote {len(PACKED)} file(s)" in done.stderr
        written = sorted(str(p.relative_to(into)) for p in into.rglob("*") if not p.is_dir())
        assert written == PACKED  # no notes.md, .git, __pycache__, dot file, nor unmatched data file
        assert {path: (into / path).read_bytes() for path in PACKED} == files
    assert b"'old'" in first_run.files["helpers.py"] and b"'new'" in now["helpers.py"]


def test_a_worker_running_only_registered_flows_refuses_the_shipped_call_in_one_line(
        client: Client, cluster: Cluster) -> None:
    folder = cluster.workdir / "on-reg"
    folder.mkdir()
    (folder / "flows.py").write_text(textwrap.dedent('''
        from fluksio import Flow

        travels_reg = Flow("travels_reg", inputs={"x": int})


        @travels_reg.node(provides="y", device="reg")
        def double(x):
            return 2 * x
    '''))
    (cluster.workdir / "box3").mkdir()
    cluster.start_worker("box3", "--labels", "reg", "--cpus", "1", "--gpus", "none", "--accept-code", "registered",
                         cwd=cluster.workdir / "box3")
    try:
        cluster.wait_attached("box3")
        record = client.submit(load(f"{folder / 'flows.py'}:travels_reg"), {"x": 4}).wait(timeout=120)
    finally:
        cluster.stop("box3")
        beats = redis.Redis.from_url(cluster.redis.url)
        wait_for(lambda: not beats.exists("fluksio:heartbeat:box3"), timeout=30, what="box3's heartbeat to go")
    assert record.status is RunStatus.ERROR
    [node] = record.nodes
    assert node.node == "double" and node.status == "error" and node.machine == "box3"
    digest = record.code_digest
    assert digest is not None and record.code_entry == "flows.py"
    assert node.error == (
        "machine box3 runs only the flows FLUKSIO_FLOWS loads (FLUKSIO_ACCEPT_CODE=registered), and flow "
        f"'travels_reg' of run {record.id} came with code package sha256:{digest[7:19]}…, which it does not "
        "hold; set FLUKSIO_ACCEPT_CODE=signed (or any) on box3 (`fluksio worker --accept-code signed`) to run "
        "shipped code, or restart it on the same code")
    assert "shipped code packages" not in cluster.log_of("box3")


def test_a_package_whose_stored_bytes_were_altered_is_refused_and_never_imported(
        client: Client, cluster: Cluster) -> None:
    def version(folder: Path, name: str) -> Path:
        folder.mkdir()
        (folder / "flows.py").write_text(textwrap.dedent(f'''
            import os
            from pathlib import Path

            from fluksio import Flow

            MARKS = Path({str(cluster.marks)!r})
            (MARKS / f"imported.{name}.{{os.getpid()}}").write_text("")

            tampered = Flow("tampered", inputs={{"x": int}})


            @tampered.node(provides="y")
            def touch(x):
                (MARKS / f"ran.{name}.{{os.getpid()}}").write_text("")
                return x
        '''))
        return folder / "flows.py"

    honest = version(cluster.workdir / "honest", "honest")
    evil = pack(str(version(cluster.workdir / "evil", "evil")))  # a sound package, under another digest
    flow = load(f"{honest}:tampered")
    package = pack(str(honest), flow.include, flow.module)
    store = client._runtime.artifacts
    store.put(Artifact.from_bytes(package.data))
    stored = store.path(package.digest)
    stored.chmod(0o644)
    stored.write_bytes(evil.data)

    record = client.submit(flow, {"x": 1}).wait(timeout=120)
    assert record.status is RunStatus.ERROR and record.code_digest == package.digest
    [node] = record.nodes
    assert node.node == "touch" and node.machine in BOXES
    assert node.error == (f"code package {package.digest} in the artifact store does not match its digest: altered "
                          "or corrupted; refused, never imported")
    assert marks_of_others(cluster.marks, "imported.honest.*") == []
    assert marks_of_others(cluster.marks, "imported.evil.*") == []
    assert list(cluster.marks.glob("ran.*")) == []
    folder = "sha256-" + package.digest.removeprefix("sha256:")
    assert not any((cluster.workdir / name / ".fluksio" / "code" / folder).exists() for name in BOXES)


def test_a_package_over_the_size_limit_is_refused_at_submit_naming_its_largest_files(
        cluster: Cluster) -> None:
    folder = cluster.workdir / "too-big"
    (folder / "data").mkdir(parents=True)
    text = 'from fluksio import Flow\n\ntoo_big = Flow("too_big", include=["data/*"])\ntoo_big.node(lambda: 1, ' \
           'name="one", provides="one")\n'
    (folder / "flows.py").write_text(text)
    (folder / "data" / "big.bin").write_bytes(os.urandom(300_000))
    (folder / "data" / "medium.bin").write_bytes(os.urandom(120_000))
    (folder / "data" / "small.txt").write_text("small\n")
    flow = load(f"{folder / 'flows.py'}:too_big")
    package = pack(str(folder / "flows.py"), flow.include, flow.module)
    with connect(settings_of(cluster, code_max_mb=0.2)) as small:
        with pytest.raises(RunRejected) as refused:
            small.submit(flow, {})
        assert small.runs(flow="too_big") == []
        assert not small._runtime.artifacts.exists(package.digest)
    assert str(refused.value) == (
        f"the code package of flow 'too_big' is {len(package.data) / 2**20:.1f} MB, over the 0.2 MB limit "
        f"(FLUKSIO_CODE_MAX_MB); its largest files: data/big.bin (300 KB), data/medium.bin (120 KB), flows.py "
        f"({len(text)} B). Keep data out of the flow's imports and include= globs (read it from the artifact "
        "store), or raise the limit")


def test_an_earlier_package_reruns_unchanged_on_the_workers_after_the_edit(
        client: Client, cluster: Cluster, first_run: FirstRun, overlapping: Overlapping,
        worker_processes: dict[str, tuple[subprocess.Popen[bytes], int]]) -> None:
    digest = first_run.record.code_digest
    assert digest is not None and overlapping.new.code_digest != digest  # the project holds the new code now
    (cluster.marks / "release.again").write_text("")
    record = client.submit("travels", {"tag": "again", "items": ITEMS}, code=digest, no_cache=True).wait(timeout=120)
    assert_ok(record)
    assert record.code_digest == digest and record.code_entry == "flows.py"
    assert {k: v for k, v in result_of(record).items() if k != "held"} == expected_result("old")
    assert result_of(record)["held"]["constant"] == "old"
    rows = called_rows(client, record)
    assert all(machine in BOXES and cached is None for _, machine, cached in rows), rows
    assert worker_processes[machine_of(record, "hold")][1] in result_of(record)["held"]["ancestors"]
    for name, (process, _) in worker_processes.items():
        assert cluster.workers[name] is process and process.poll() is None
