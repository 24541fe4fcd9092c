"""Calls of shipped code packages, with real processes and without Celery: this test process plays the pool
process that asks (fluksio/execution/warm.py), a real ``python -m fluksio.execution.forkserver`` forks a
package server per package (fluksio/execution/package_server.py), and that forks each GPU call and gives
each pool process a runner of its own for its CPU calls (fluksio/execution/runners.py, kept.py). Several
versions of one flow run side by side, none of them restarting anything, none seeing the worker's own flows."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import Settings
from fluksio.artifacts.local import LocalArtifactStore
from fluksio.errors import NodeFailed
from fluksio.execution.code_cache import CodeCache
from fluksio.execution.isolated import run_package_in_child
from fluksio.execution.package_server import MAX_PACKAGE_SERVERS, package_header
from fluksio.execution.warm import WarmStarts
from fluksio.flows.package import CodePackage
from fluksio.messages import NodeCall
from fluksio.schemas import Grant
from fluksio.store.db import Database
from tests.integration.support.package_flows import (
    BLOB,
    BROKEN_FLOW,
    CRASH,
    HANG,
    OVERDUE,
    RESIDENT_FLOW,
    SHIPPED_FLOW,
    shipped_package,
    write_tree,
)
from tests.integration.support.processes import gone, wait_for_mark

pytestmark = pytest.mark.integration

FORK_SERVER = "fluksio.execution.forkserver"
#: The shipped flow with nodes that overrun their timeout, that never end, that store an artifact, and that
#: end their process.
EVERY_NODE = SHIPPED_FLOW + OVERDUE + HANG + BLOB + CRASH


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("packages")


@pytest.fixture(scope="module")
def installation(workdir: Path) -> dict[str, str]:
    """A worker's environment: a run store, artifacts, its own flows (with their own ``helpers``), marks."""
    database = f"sqlite:///{workdir / 'fluksio.db'}"
    store = Database(database)
    store.upgrade()
    store.dispose()
    resident = write_tree(workdir / "worker", RESIDENT_FLOW, "the worker's")
    return {"FLUKSIO_DATABASE_URL": database, "FLUKSIO_ARTIFACTS_DIR": str(workdir / "artifacts"),
            "FLUKSIO_FLOWS": str(resident), "FLUKSIO_CONFIG": str(workdir / "none.toml"),
            "TEST_FLUKSIO_MARKS": str(workdir / "marks")}


@pytest.fixture(autouse=True)
def _environment(_clean_fluksio_env: None, installation: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """What this process has while a test runs: what a worker has (its fresh interpreters inherit it)."""
    for key, value in installation.items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="module")
def store(installation: dict[str, str]) -> LocalArtifactStore:
    return LocalArtifactStore(installation["FLUKSIO_ARTIFACTS_DIR"])


@pytest.fixture(scope="module")
def cache(workdir: Path) -> CodeCache:
    return CodeCache(workdir / "code", 100_000_000)


@pytest.fixture(scope="module")
def versions(workdir: Path, store: LocalArtifactStore) -> dict[str, CodePackage]:
    """Two versions of the flow ``shipped``, whose ``helpers.CONSTANT`` differ."""
    return {version: shipped_package(workdir / "submitted" / version, version, store, flow=EVERY_NODE)
            for version in ("v1", "v2")}


def start_warm(installation: dict[str, str]) -> WarmStarts:
    with pytest.MonkeyPatch.context() as patch:  # a worker's environment, whatever the test's is
        for key in [k for k in os.environ if k.startswith("FLUKSIO_")]:
            patch.delenv(key)
        for key, value in installation.items():
            patch.setenv(key, value)
        starts = WarmStarts.start()
    assert starts.wait_ready() is None
    return starts


@pytest.fixture(scope="module")
def warm(installation: dict[str, str]) -> Iterator[WarmStarts]:
    starts = start_warm(installation)
    yield starts
    starts.close()


def call_of(package: CodePackage, node: str = "look", tag: str = "", gpus: tuple[int, ...] = (),
            flow: str = "shipped") -> NodeCall:
    call_id = f"run1.{node}.{time.time_ns()}"
    return NodeCall(call_id=call_id, run_id="run1", flow=flow, node=node, attempt=1, inputs={"tag": tag},
                    grant=Grant(id=call_id, machine="box", cpus=1, gpus=gpus), code_digest=package.digest,
                    code_entry=package.entry)


def marks(installation: dict[str, str]) -> Path:
    return Path(installation["TEST_FLUKSIO_MARKS"])


def children_of(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_two_versions_of_one_flow_run_side_by_side_each_with_its_own_helpers(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore) -> None:
    seen: dict[str, dict] = {}
    folders = {version: cache.checkout(store, package.digest) for version, package in versions.items()}

    def run(version: str) -> None:
        package = versions[version]
        seen[version] = warm.run_packaged(call_of(package), (), folders[version]).outputs["seen"]

    threads = [threading.Thread(target=run, args=(version,)) for version in ("v1", "v2", "v1")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert {version: s["constant"] for version, s in seen.items()} == {"v1": "v1", "v2": "v2"}
    for version, s in seen.items():
        # The package's helpers, not the worker's module of the same name, which its fork server imported.
        assert Path(s["helpers"]).parent == folders[version]
        assert s["flow_files"] == [str(folders[version] / "flows.py")]  # FLUKSIO_FLOWS is forgotten
        assert FORK_SERVER in s["parent"] and s["pid"] != warm.process.pid
        assert s["devices"] == ""  # a call granted no GPUs sees none
    # One package server per package, children of the fork server; each call a child of its package's server.
    servers = children_of(warm.process.pid)
    assert len(servers) == 2


def test_a_package_call_granted_gpus_sees_exactly_them_and_its_logs_come_back(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore) -> None:
    package = versions["v2"]
    ran = warm.run_packaged(call_of(package, gpus=(1, 3)), (1, 3), cache.checkout(store, package.digest))
    assert ran.outputs["seen"]["devices"] == "1,3" and ran.outputs["seen"]["constant"] == "v2"
    assert ran.logs.count("looked from v2") == 1
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_a_package_call_past_its_timeout_is_killed_by_its_own_child(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore,
        installation: dict[str, str]) -> None:
    package = versions["v1"]
    started = time.monotonic()
    with pytest.raises(NodeFailed, match="node 'overdue' timed out after 1 s") as failed:
        warm.run_packaged(call_of(package, "overdue", "pkg-overdue"), (), cache.checkout(store, package.digest))
    assert time.monotonic() - started < 15
    assert "going to sleep" in (failed.value.logs or "")
    assert failed.value.error_types and failed.value.error_types[0] == "TimeoutError"
    overdue = wait_for_mark(marks(installation), "pkg-overdue")
    assert gone(overdue)  # its runner gave up on the call's thread, reported, and exited
    seen = warm.run_packaged(call_of(package), (), cache.checkout(store, package.digest)).outputs["seen"]
    assert seen["constant"] == "v1" and seen["pid"] != overdue  # the next call: another runner, working


def test_a_package_that_fails_to_import_says_where_in_one_line(
        warm: WarmStarts, workdir: Path, cache: CodeCache, store: LocalArtifactStore) -> None:
    broken = shipped_package(workdir / "submitted" / "broken", "b", store, flow=BROKEN_FLOW)
    folder = cache.checkout(store, broken.digest)
    for start in (warm.run_packaged, run_package_in_child):
        with pytest.raises(NodeFailed) as failed:
            start(call_of(broken), (), folder)
        error = str(failed.value)
        assert "\n" not in error and error.startswith(f"code package {broken.digest[:19]}… failed to import")
        assert f"{folder / 'flows.py'}:4: ZeroDivisionError: division by zero" in error
    with pytest.raises(NodeFailed, match="failed to import"):  # its server stays, and says it again
        warm.run_packaged(call_of(broken), (), folder)


def test_what_a_package_lacks_or_files_that_do_not_digest_are_refused(
        warm: WarmStarts, workdir: Path, versions: dict[str, CodePackage], cache: CodeCache,
        store: LocalArtifactStore) -> None:
    package = versions["v1"]
    folder = cache.checkout(store, package.digest)
    with pytest.raises(NodeFailed, match=r"defines no flow 'other' in flows.py \(it defines: shipped\)"):
        warm.run_packaged(call_of(package, flow="other"), (), folder)
    with pytest.raises(NodeFailed, match="flow 'shipped' of code package .* has no node 'absent'"):
        warm.run_packaged(call_of(package, "absent"), (), folder)
    altered = shipped_package(workdir / "submitted" / "altered", "original", store)
    tampered = cache.checkout(store, altered.digest)
    (tampered / "helpers.py").write_text("CONSTANT = 'tampered'\n")  # after the check of the bytes
    with pytest.raises(NodeFailed, match="the package's files do not digest to"):
        warm.run_packaged(call_of(altered), (), tampered)


def test_the_fresh_interpreter_imports_the_package_alone(
        versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore) -> None:
    package = versions["v2"]
    folder = cache.checkout(store, package.digest)
    seen = run_package_in_child(call_of(package, gpus=(2,)), (2,), folder).outputs["seen"]
    assert seen["constant"] == "v2" and seen["devices"] == "2"
    assert FORK_SERVER not in seen["parent"]
    assert seen["flow_files"] == [str(folder / "flows.py")]  # FLUKSIO_FLOWS never loaded
    with pytest.raises(NodeFailed, match="timed out after 1 s"):
        run_package_in_child(call_of(package, "overdue", "fresh-overdue"), (), folder)


def test_the_fresh_interpreter_takes_the_settings_it_is_handed(
        installation: dict[str, str], workdir: Path, versions: dict[str, CodePackage], cache: CodeCache,
        store: LocalArtifactStore) -> None:
    """As the embedded default hands its own: settings given in code, not in the environment."""
    package = versions["v1"]
    elsewhere = LocalArtifactStore(workdir / "artifacts-elsewhere")
    settings = Settings(database_url=installation["FLUKSIO_DATABASE_URL"], artifacts_dir=elsewhere.root)
    ran = run_package_in_child(call_of(package, "blob", "here"), (), cache.checkout(store, package.digest),
                               settings=settings)
    [made] = ran.artifacts
    assert elsewhere.get(made.digest) == b"made for here" and not store.exists(made.digest)


def test_past_the_most_package_servers_the_least_recent_stops_and_comes_back_when_asked(
        installation: dict[str, str], workdir: Path, cache: CodeCache, store: LocalArtifactStore) -> None:
    starts = start_warm(installation)
    try:
        packages = [shipped_package(workdir / "submitted" / f"many{n}", f"many{n}", store)
                    for n in range(MAX_PACKAGE_SERVERS + 1)]
        runners = []
        for n, package in enumerate(packages):
            folder = cache.checkout(store, package.digest)
            seen = starts.run_packaged(call_of(package), (), folder).outputs["seen"]
            assert seen["constant"] == f"many{n}"
            runners.append(seen["pid"])
        deadline = time.monotonic() + 10
        while len(children_of(starts.process.pid)) > MAX_PACKAGE_SERVERS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(children_of(starts.process.pid)) == MAX_PACKAGE_SERVERS
        assert gone(runners[0]) and not gone(runners[1], timeout=0)  # the stopped server's runner went with it
        first = packages[0]
        again = starts.run_packaged(call_of(first), (), cache.checkout(store, first.digest))
        assert again.outputs["seen"]["constant"] == "many0"
    finally:
        starts.close()


def test_a_package_call_dies_with_its_worker(installation: dict[str, str], versions: dict[str, CodePackage],
                                             cache: CodeCache, store: LocalArtifactStore) -> None:
    starts = start_warm(installation)
    package = versions["v1"]
    failure: list[BaseException] = []

    def run(tag: str, gpus: tuple[int, ...]) -> None:
        try:
            starts.run_packaged(call_of(package, "hang", tag), gpus, cache.checkout(store, package.digest))
        except BaseException as exc:  # noqa: BLE001 - looked at below
            failure.append(exc)

    # One granted a GPU (a child forked for it) and one granted none (in a runner).
    threads = [threading.Thread(target=run, args=args) for args in (("pkg-orphan", (0,)), ("runner-orphan", ()))]
    for thread in threads:
        thread.start()
    pids = [wait_for_mark(marks(installation), tag) for tag in ("pkg-orphan", "runner-orphan")]
    servers = children_of(starts.process.pid)
    starts.close()
    assert all(gone(pid) for pid in pids) and all(gone(server) for server in servers)
    for thread in threads:
        thread.join(15)
    assert len(failure) == 2 and all("went away while node 'hang' ran" in str(f) for f in failure)


def test_a_package_call_dies_when_its_pool_process_lets_go(warm: WarmStarts, versions: dict[str, CodePackage],
                                                          cache: CodeCache, store: LocalArtifactStore,
                                                          installation: dict[str, str]) -> None:
    """A cancel kills the pool process that asked: its end of the call's socket closes, as here."""
    package = versions["v2"]
    folder = cache.checkout(store, package.digest)
    conn, output = warm._ask(call_of(package, "hang", "pkg-cancel"), (), package_header(folder, package.entry))
    pid = wait_for_mark(marks(installation), "pkg-cancel")
    conn.close()
    os.close(output)
    assert gone(pid)


def test_cpu_calls_of_a_package_run_one_after_another_in_one_runner_that_holds_the_package_alone(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore) -> None:
    package = versions["v1"]
    folder = cache.checkout(store, package.digest)
    first, second = (warm.run_packaged(call_of(package, tag=f"again{n}"), (), folder) for n in range(2))
    seen = [first.outputs["seen"], second.outputs["seen"]]
    assert seen[0]["pid"] == seen[1]["pid"]  # no fork for the second: the same runner
    runner = seen[0]["pid"]
    server = parent_of(runner)
    assert server in children_of(warm.process.pid) and runner not in children_of(warm.process.pid)
    for s in seen:  # its modules are still the package's alone
        assert s["constant"] == "v1" and Path(s["helpers"]).parent == folder
        assert s["flow_files"] == [str(folder / "flows.py")] and s["devices"] == ""
    assert second.logs.count("looked from v1") == 1  # each call's own logs, not the last one's too
    # A call granted GPUs still gets a process of its own, forked for it.
    gpu = [warm.run_packaged(call_of(package, gpus=(0,)), (0,), folder).outputs["seen"] for _ in range(2)]
    assert gpu[0]["pid"] != gpu[1]["pid"] and runner not in (gpu[0]["pid"], gpu[1]["pid"])
    assert all(s["devices"] == "0" and s["constant"] == "v1" for s in gpu)


def test_calls_of_two_packages_never_share_a_runner(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore) -> None:
    pids: dict[str, set[int]] = {"v1": set(), "v2": set()}
    for version in ("v1", "v2") * 3:
        package = versions[version]
        seen = warm.run_packaged(call_of(package), (), cache.checkout(store, package.digest)).outputs["seen"]
        assert seen["constant"] == version
        pids[version].add(seen["pid"])
    assert not pids["v1"] & pids["v2"]
    assert {parent_of(pid) for pid in pids["v1"]}.isdisjoint({parent_of(pid) for pid in pids["v2"]})


def test_a_cancelled_cpu_call_asked_of_the_server_takes_its_runner(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore,
        installation: dict[str, str]) -> None:
    # The way a call goes when no runner can be kept: each call asks the package server for a runner.
    package = versions["v2"]
    folder = cache.checkout(store, package.digest)
    conn, output = warm._ask(call_of(package, "hang", "runner-cancel"), (),
                             package_header(folder, package.entry, runner=True))
    runner = wait_for_mark(marks(installation), "runner-cancel")
    assert parent_of(runner) in children_of(warm.process.pid)  # a runner of the package's server
    conn.close()  # as a cancel does: the pool process is killed
    os.close(output)
    assert gone(runner)
    after = warm.run_packaged(call_of(package, tag="after"), (), folder)
    assert after.outputs["seen"]["pid"] != runner and after.outputs["seen"]["constant"] == "v2"


def test_a_pool_process_killed_mid_call_takes_its_kept_runner_with_it(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore,
        installation: dict[str, str]) -> None:
    package = versions["v2"]
    folder = cache.checkout(store, package.digest)
    mine = warm.run_packaged(call_of(package), (), folder).outputs["seen"]["pid"]
    pool = os.fork()  # another pool process of the worker: it keeps a runner of its own
    if pool == 0:
        try:
            warm.run_packaged(call_of(package, "hang", "kept-cancel"), (), folder)
        finally:
            os._exit(0)
    runner = wait_for_mark(marks(installation), "kept-cancel")
    assert runner != mine and parent_of(runner) == parent_of(mine)  # the same package server's
    os.kill(pool, signal.SIGKILL)  # as a cancel does
    os.waitpid(pool, 0)
    assert gone(runner)
    again = warm.run_packaged(call_of(package, tag="again"), (), folder).outputs["seen"]
    assert again["pid"] == mine and again["constant"] == "v2"  # this process's runner was untouched


def test_a_pool_process_interrupted_while_its_kept_runner_runs_a_call_has_the_runner_killed(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore,
        installation: dict[str, str]) -> None:
    package = versions["v1"]
    folder = cache.checkout(store, package.digest)

    class Interrupted(BaseException):
        pass

    def interrupt(*_: object) -> None:
        raise Interrupted

    def interrupt_once_started() -> None:
        wait_for_mark(marks(installation), "kept-interrupt")
        os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        threading.Thread(target=interrupt_once_started, daemon=True).start()
        with pytest.raises(Interrupted):  # as a cancel raised in the pool process while it waits
            warm.run_packaged(call_of(package, "hang", "kept-interrupt"), (), folder)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert gone(wait_for_mark(marks(installation), "kept-interrupt"))
    after = warm.run_packaged(call_of(package, tag="after"), (), folder).outputs["seen"]
    assert after["constant"] == "v1"


def test_a_kept_runner_gone_between_calls_is_replaced_without_losing_the_call(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore) -> None:
    package = versions["v1"]
    folder = cache.checkout(store, package.digest)
    before = warm.run_packaged(call_of(package), (), folder).outputs["seen"]["pid"]
    os.kill(before, signal.SIGKILL)  # idle: as one that exited after IDLE_S, or whose server let it go
    assert gone(before)
    after = warm.run_packaged(call_of(package, tag="replaced"), (), folder)
    assert after.outputs["seen"]["pid"] != before and after.outputs["seen"]["constant"] == "v1"
    assert "looked from v1" in after.logs


def test_a_cpu_call_that_ends_its_runner_fails_with_what_it_wrote_and_the_next_call_gets_another(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore) -> None:
    package = versions["v1"]
    folder = cache.checkout(store, package.digest)
    before = warm.run_packaged(call_of(package), (), folder).outputs["seen"]["pid"]
    with pytest.raises(NodeFailed, match="node 'crash' exited with code 3 before reporting") as failed:
        warm.run_packaged(call_of(package, "crash"), (), folder)
    assert "dying from v1" in (failed.value.logs or "")  # written past Python, into the call's own output
    assert gone(before)
    after = warm.run_packaged(call_of(package), (), folder).outputs["seen"]
    assert after["pid"] != before and after["constant"] == "v1"


def test_past_its_most_kept_runners_a_pool_process_lets_the_least_recently_used_go(
        warm: WarmStarts, versions: dict[str, CodePackage], cache: CodeCache, store: LocalArtifactStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    warm.kept.close()  # none kept from earlier tests
    monkeypatch.setattr(warm.kept, "most", 1)
    folders = {version: cache.checkout(store, package.digest) for version, package in versions.items()}
    first = warm.run_packaged(call_of(versions["v1"]), (), folders["v1"]).outputs["seen"]["pid"]
    other = warm.run_packaged(call_of(versions["v2"]), (), folders["v2"]).outputs["seen"]
    assert other["constant"] == "v2"
    assert gone(first)  # let go gently: it left once its channel ended
    assert [package for package, _ in warm.kept.kept] == [str(folders["v2"])]
    again = warm.run_packaged(call_of(versions["v1"]), (), folders["v1"]).outputs["seen"]
    assert again["pid"] != first and again["constant"] == "v1" and gone(other["pid"])
