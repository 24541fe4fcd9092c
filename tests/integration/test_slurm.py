"""The Slurm provisioner against a real single-node Slurm and a real Redis, all on 127.0.0.1.

The module starts a private Slurm cluster of its own with scripts/slurm.sh (its own folder and free
ports; it never uses a SLURM_CONF from the environment, which could name a real cluster) and stops it
after. That needs root and the Debian packages slurm-wlm and munge: outside CI their absence skips
these tests, with CI=true it fails them.

The jobs run on this machine, so their `fluksio worker` reaches the test's Redis on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from fluksio.constants import HEARTBEAT_KEY, MACHINE_KEY
from fluksio.provisioners import RequestState
from fluksio.provisioners.config import SlurmProfile
from fluksio.provisioners.redis_store import RedisRequestStore
from fluksio.provisioners.request import MachineRequest
from fluksio.provisioners.slurm import CommandResult, SlurmProvisioner, run_command
from fluksio.settings import Settings
from tests.integration.support.servers import RedisServer, free_port, in_ci, need

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SLURM_SH = REPO / "scripts" / "slurm.sh"
#: Where this test's `fluksio` command lives; the jobs' prerun puts it first on PATH.
VENV_BIN = Path(sys.executable).parent


class SlurmCluster:
    """A private single-node Slurm, started and stopped with scripts/slurm.sh."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        self.env.update({"SLURM_BASE": str(base), "SLURMCTLD_PORT": str(free_port()),
                         "SLURMD_PORT": str(free_port())})
        self.conf = str(base / "slurm.conf")
        self.started = False

    def start(self) -> SlurmCluster:
        for binary in ("sbatch", "squeue", "scancel", "slurmctld", "slurmd", "munged"):
            need(binary)
        if os.geteuid() != 0:
            message = "a private Slurm needs root (slurmd starts jobs as their users)"
            if in_ci():
                pytest.fail(message)
            pytest.skip(message)
        self.started = True
        done = subprocess.run(["bash", str(SLURM_SH), "start"], env=self.env, capture_output=True, text=True,
                              timeout=180)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/slurm.sh start failed ({done.returncode}): {done.stderr[-3000:]}")
        return self

    def stop(self) -> None:
        if self.started:
            subprocess.run(["bash", str(SLURM_SH), "stop"], env=self.env, capture_output=True, timeout=120)
            self.started = False

    def squeue(self, job_id: str) -> str:
        """``STATE|REASON`` of the job, or ``""`` once Slurm has forgotten it."""
        done = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%r"],
                              env={**self.env, "SLURM_CONF": self.conf}, capture_output=True, text=True, timeout=30)
        return done.stdout.strip()

    def wait_state(self, job_id: str, states: set[str], timeout: float) -> str:
        """Wait until the job's state is one of ``states`` ("" stands for forgotten); returns it."""
        deadline = time.monotonic() + timeout
        state = self.squeue(job_id).split("|")[0]
        while state not in states and time.monotonic() < deadline:
            time.sleep(0.2)
            state = self.squeue(job_id).split("|")[0]
        assert state in states, f"Slurm job {job_id} is {state or 'gone'}, not {sorted(states)}"
        return state


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    before = os.environ.get("SLURM_CONF")
    try:
        cluster.start()
        os.environ["SLURM_CONF"] = cluster.conf  # for the provisioner's sbatch, squeue and scancel
        yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        cluster.stop()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("installation")


@pytest.fixture
def settings(redis_server: RedisServer, workdir: Path) -> Settings:
    return Settings(broker_url=redis_server.url, database_url=f"sqlite:///{workdir / 'fluksio.db'}",
                    artifacts_dir=workdir / "artifacts", heartbeat_interval_s=0.5, heartbeat_ttl_s=2,
                    lease_interval_s=1)


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        client.close()


def profile(workdir: Path, name: str, **fields: object) -> SlurmProfile:
    return SlurmProfile.model_validate({
        "name": name, "kind": "slurm", "cpus": 1, "ram_mb": 256, "labels": ["cluster"],
        "prerun": [f"cd {workdir}", f"export PATH={VENV_BIN}:$PATH"],
        "output": str(workdir / "%x-%j.out"), "attach_timeout_s": 120, "idle_timeout_s": 6, **fields,
    })


@pytest.fixture
def provision(slurm: SlurmCluster, settings: Settings, redis_client: redis.Redis,
              workdir: Path) -> Iterator[Callable[..., SlurmProvisioner]]:
    made: list[SlurmProvisioner] = []

    def make(*profiles: SlurmProfile) -> SlurmProvisioner:
        provisioner = SlurmProvisioner(
            profiles, settings, RedisRequestStore(redis_client),
            is_attached=lambda name: bool(redis_client.exists(HEARTBEAT_KEY + name)), cwd=workdir,
        )
        made.append(provisioner)
        return provisioner

    try:
        yield make
    finally:
        for provisioner in made:
            provisioner.shutdown()
            for request in provisioner.store.live():  # attached jobs too: nothing outlives its test
                if request.job_id and request.profile in provisioner.profiles:
                    provisioner._cancel_quietly(provisioner.profiles[request.profile], request.job_id)


def submit(provisioner: SlurmProvisioner, name: str, reason: str) -> MachineRequest:
    """Ask for a machine and wait for sbatch's answer (``request()`` returns before it): the request then."""
    asked = provisioner.request(name, reason)
    assert provisioner.join_submissions(150), "the submission did not return"
    now = next((r for r in provisioner.store.live() if r.id == asked.id), None) or provisioner.store.last(name)
    assert now is not None and now.id == asked.id, f"request {asked.id} is neither live nor {name}'s last"
    return now


def poll_until(provisioner: SlurmProvisioner, request: MachineRequest, states: set[RequestState],
               timeout: float) -> MachineRequest:
    """Poll as a driver's Poller would, until the request reaches one of ``states``."""
    deadline = time.monotonic() + timeout
    current = request
    while time.monotonic() < deadline:
        provisioner.poll()
        current = next((r for r in provisioner.store.live() if r.id == request.id), None) or \
            provisioner.store.last(request.profile) or current
        if current.id == request.id and current.state in states:
            return current
        if current.id == request.id and not current.state.is_live():
            break  # ended some other way: no point waiting on
        time.sleep(0.5)
    output = Path(current.output or "/nonexistent")
    tail = output.read_text()[-3000:] if output.exists() else "(no output yet)"
    raise AssertionError(f"request is {current.state.value}, not {'/'.join(s.value for s in states)} "
                         f"({current.describe(time.time())}); job output {output}:\n{tail}")


def test_a_job_for_a_cluster_profile_attaches_a_worker_that_leaves_when_idle(
        provision: Callable[..., SlurmProvisioner], workdir: Path, redis_client: redis.Redis,
        slurm: SlurmCluster) -> None:
    slurm_profile = profile(workdir, "cluster", idle_timeout_s=6)
    provisioner = provision(slurm_profile)
    request = submit(provisioner, "cluster", "a node waits for a worker labelled 'cluster'")
    assert request.state is RequestState.PENDING and request.job_id, request.outcome
    # One outstanding request per profile: asking again gets the same job.
    assert provisioner.request("cluster", "another node waits").job_id == request.job_id

    attached = poll_until(provisioner, request, {RequestState.ATTACHED}, timeout=120)
    machine = f"slurm-cluster-{request.job_id}"
    assert attached.machine == machine
    inventory = json.loads(redis_client.hget(MACHINE_KEY + machine, "inventory"))
    assert inventory["labels"] == ["cluster"] and inventory["cpus"] == 1 and inventory["ram_mb"] == 256
    assert slurm.squeue(request.job_id).startswith("RUNNING")
    [row] = provisioner.status()
    assert (row["state"], row["job_id"], row["machine"]) == ("attached", request.job_id, machine)

    # No call comes: after idle_timeout_s the worker exits, detaches, and the job ends.
    finished = poll_until(provisioner, request, {RequestState.FINISHED}, timeout=6 + 60)
    assert not redis_client.exists(HEARTBEAT_KEY + machine)
    assert not redis_client.sismember("fluksio:machines", machine)
    assert finished.ended_at - attached.attached_at >= 6 - 1  # not before its idle timeout
    assert finished.outcome.startswith(f"Slurm job {request.job_id} (profile 'cluster') ")
    assert slurm.squeue(request.job_id) in ("COMPLETED|None", "")  # ended well (or already purged)
    assert provisioner.status()[0]["state"] == "idle"


def test_a_held_job_is_cancelled_after_the_attach_timeout_and_says_why(
        provision: Callable[..., SlurmProvisioner], workdir: Path, slurm: SlurmCluster) -> None:
    provisioner = provision(profile(workdir, "held", sbatch_args=["--hold"], attach_timeout_s=4))
    request = submit(provisioner, "held", "a node waits for a worker labelled 'cluster'")
    assert request.state is RequestState.PENDING and request.job_id, request.outcome
    provisioner.poll()
    [row] = provisioner.status()
    assert (row["state"], row["job_id"], row["job_state"], row["job_reason"]) == (
        "pending", request.job_id, "PENDING", "JobHeldUser")
    assert row["pending_s"] >= 0
    cancelled = poll_until(provisioner, request, {RequestState.CANCELLED}, timeout=30)
    assert cancelled.outcome == (f"Slurm job {request.job_id} (profile 'held') was cancelled: its worker did not "
                                 "attach within 4s (Slurm said: PENDING, JobHeldUser)")
    slurm.wait_state(request.job_id, {"CANCELLED", ""}, timeout=20)
    # What a waiting run is told from now on (and the profile is not resubmitted in a loop).
    assert provisioner.request("held", "again") == cancelled
    assert provisioner.current("held").describe(time.time()) == cancelled.outcome
    assert provisioner.status()[0]["last"] == cancelled.outcome


def test_a_job_larger_than_the_node_never_attaches_and_is_cancelled_or_refused(
        provision: Callable[..., SlurmProvisioner], workdir: Path, slurm: SlurmCluster) -> None:
    provisioner = provision(profile(workdir, "huge", cpus=(os.cpu_count() or 1) + 62, attach_timeout_s=4))
    request = submit(provisioner, "huge", "a node waits for a worker labelled 'cluster'")
    if request.state is RequestState.FAILED:  # some Slurm versions refuse it at once
        assert "sbatch refused the job" in request.outcome
        return
    cancelled = poll_until(provisioner, request, {RequestState.CANCELLED}, timeout=30)
    assert cancelled.outcome.startswith(f"Slurm job {request.job_id} (profile 'huge') was cancelled: its worker "
                                        "did not attach within 4s (Slurm said: PENDING")


def test_shutdown_cancels_an_outstanding_request(provision: Callable[..., SlurmProvisioner], workdir: Path,
                                                 slurm: SlurmCluster) -> None:
    held = profile(workdir, "stopping", sbatch_args=["--hold"], attach_timeout_s=300)
    provisioner = provision(held)
    bystander = provision(profile(workdir, "other", sbatch_args=["--hold"], attach_timeout_s=300))
    request = submit(provisioner, "stopping", "a node waits")
    theirs = submit(bystander, "other", "another driver's node waits")
    assert slurm.squeue(request.job_id).startswith("PENDING")
    [cancelled] = provisioner.shutdown()
    assert cancelled.id == request.id and cancelled.state is RequestState.CANCELLED
    assert "the driver worker that asked for it shut down" in cancelled.outcome
    slurm.wait_state(request.job_id, {"CANCELLED", ""}, timeout=20)
    # Another process's request is not this driver's to cancel.
    assert slurm.squeue(theirs.job_id).startswith("PENDING")
    assert provisioner.store.outstanding("other") == theirs


def test_shutdown_while_sbatch_runs_cancels_the_job_it_returns(provision: Callable[..., SlurmProvisioner],
                                                               workdir: Path, slurm: SlurmCluster) -> None:
    """A slow login node: the driver worker stops while sbatch has not answered. Once it does, the job is
    cancelled (nothing is left in the queue), and a driver that asks meanwhile is never held up."""
    import threading

    provisioner = provision(profile(workdir, "slow", sbatch_args=["--hold"], attach_timeout_s=300))
    answer, in_sbatch, submitted = threading.Event(), threading.Event(), []

    def slow_sbatch(argv: list[str], stdin: str | None, timeout_s: float) -> CommandResult:
        if argv[0] == "sbatch":
            in_sbatch.set()
            assert answer.wait(60)
        result = run_command(argv, stdin, timeout_s)
        if argv[0] == "sbatch":
            submitted.append(result.stdout.strip())
        return result

    provisioner.runner = slow_sbatch
    started = time.monotonic()
    asked = provisioner.request("slow", "a node waits")
    assert time.monotonic() - started < 1.0 and asked.job_id is None
    assert "submitting a Slurm job for profile 'slow'" in asked.describe(time.time())
    assert in_sbatch.wait(10)
    stopping = threading.Thread(target=provisioner.shutdown, kwargs={"timeout_s": 60})
    stopping.start()
    answer.set()
    stopping.join(90)
    assert not stopping.is_alive()
    [job_id] = submitted
    assert job_id.isdigit()  # sbatch did submit it ...
    slurm.wait_state(job_id, {"CANCELLED", ""}, timeout=20)  # ... and it was cancelled
    ended = provisioner.store.last("slow")
    assert ended.id == asked.id and ended.state is RequestState.CANCELLED and provisioner.store.live() == []


#: The password of the password-protected Redis below: it must reach the worker and nothing Slurm keeps.
PASSWORD = "fluksio-s3cret-pw"


@pytest.fixture(scope="module")
def secret_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("secret-redis"), password=PASSWORD).start()
    try:
        yield server
    finally:
        server.stop()


def slurm_records(slurm: SlurmCluster, job_id: str) -> str:
    """Everything Slurm keeps of a job that could hold a setting: the script it shows
    (``scontrol write batch_script``) and the files of its state folder (script and environment)."""
    shown = subprocess.run(["scontrol", "write", "batch_script", job_id, "-"],
                           env={**slurm.env, "SLURM_CONF": slurm.conf}, capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0 and "exec fluksio worker" in shown.stdout, shown.stderr
    kept = [path for folder in (slurm.base / "state").rglob(f"job.{job_id}") for path in folder.iterdir()]
    assert any(path.name == "script" for path in kept), f"no state folder of job {job_id} under {slurm.base}"
    return shown.stdout + "".join(path.read_bytes().decode(errors="replace") for path in kept)


def test_a_password_protected_broker_reaches_the_job_but_not_slurms_records(
        slurm: SlurmCluster, secret_redis: RedisServer, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(broker_url=secret_redis.url, database_url=f"sqlite:///{workdir / 'fluksio.db'}",
                        artifacts_dir=workdir / "artifacts", heartbeat_interval_s=0.5, heartbeat_ttl_s=2)
    # A driver configured through its environment, as they usually are: sbatch must not pass that on.
    monkeypatch.setenv("FLUKSIO_BROKER_URL", secret_redis.url)
    client = redis.Redis.from_url(secret_redis.url)
    provisioner = SlurmProvisioner(
        [profile(workdir, "held-secret", sbatch_args=["--hold"], attach_timeout_s=4),
         profile(workdir, "secret", idle_timeout_s=6)], settings, RedisRequestStore(client),
        is_attached=lambda name: bool(client.exists(HEARTBEAT_KEY + name)), cwd=workdir)
    folder = workdir / ".fluksio" / "credentials"
    try:
        # 1. A job that never starts: its credentials wait in a private file, which goes when it is cancelled.
        held = submit(provisioner, "held-secret", "a node waits")
        assert held.state is RequestState.PENDING, held.outcome
        waiting = folder / f"{held.id}.env"
        assert waiting.stat().st_mode & 0o777 == 0o600 and folder.stat().st_mode & 0o777 == 0o700
        assert PASSWORD in waiting.read_text()
        records = slurm_records(slurm, held.job_id)
        assert PASSWORD not in records and f". {waiting}" in records
        poll_until(provisioner, held, {RequestState.CANCELLED}, timeout=30)
        assert not waiting.exists()

        # 2. A job that starts: its worker authenticates with the password, read from the file it removed.
        request = submit(provisioner, "secret", "a node waits")
        assert request.state is RequestState.PENDING, request.outcome
        attached = poll_until(provisioner, request, {RequestState.ATTACHED}, timeout=120)
        assert client.exists(HEARTBEAT_KEY + attached.machine)
        assert PASSWORD not in slurm_records(slurm, request.job_id)
        assert list(folder.iterdir()) == []
    finally:
        provisioner.shutdown()
        for live in provisioner.store.live():
            if live.job_id and live.profile in provisioner.profiles:
                provisioner._cancel_quietly(provisioner.profiles[live.profile], live.job_id)
        client.close()


def test_sbatch_through_ssh_reports_an_unreachable_login_node(settings: Settings, workdir: Path) -> None:
    def ssh_to_port_1(argv: list[str], stdin: str | None, timeout_s: float) -> CommandResult:
        # Port 1 on 127.0.0.1: nothing listens, so ssh fails at once (and never leaves this machine).
        assert argv[0] == "ssh"
        return run_command([argv[0], "-p", "1", *argv[1:]], stdin, timeout_s)

    provisioner = SlurmProvisioner([profile(workdir, "remote", host="nobody@127.0.0.1")], settings,
                                   runner=ssh_to_port_1)
    request = submit(provisioner, "remote", "why")
    assert request.state is RequestState.FAILED and request.job_id is None
    assert request.outcome.startswith("could not submit a Slurm job for profile 'remote': ")
    # Without an ssh client here the message says that instead.
    assert ("sbatch on nobody@127.0.0.1 refused the job: ssh: connect to host 127.0.0.1 port 1: Connection refused"
            in request.outcome) or "ssh is not installed on this host" in request.outcome, request.outcome


def test_the_redis_store_lets_one_of_many_racing_drivers_submit(redis_client: redis.Redis, workdir: Path) -> None:
    from fluksio.provisioners.fake import FakeProvisioner
    from tests.unit.provisioners.racing import ask_at_once

    profiles = [profile(workdir, "raced")]
    drivers = [FakeProvisioner(profiles, RedisRequestStore(redis_client), owner=f"driver-{i}") for i in range(8)]
    answers = ask_at_once(drivers, "raced")
    assert sum(len(d.jobs) for d in drivers) == 1 and len({a.id for a in answers}) == 1
    [submitter] = [d for d in drivers if d.jobs]
    job_id = next(iter(submitter.jobs))
    # Another process sees it, and its state, through Redis.
    watcher = FakeProvisioner(profiles, RedisRequestStore(redis_client))
    assert watcher.current("raced").job_id == job_id
    submitter.attach(job_id)
    [attached] = submitter.poll()
    assert attached.state is RequestState.ATTACHED
    assert [row["state"] for row in watcher.status()] == ["attached"]
    # An ended request is never written back to life by a slower poller.
    submitter.end(job_id)
    [finished] = submitter.poll()
    assert not watcher.store.update(attached.model_copy(update={"job_state": "RUNNING"}))
    assert watcher.store.live() == [] and watcher.store.last("raced") == finished


# -- end to end, once the driver is wired to the provisioner ------------------------------------------------

FLOWS = '''
from fluksio import Flow

on_cluster = Flow("on_cluster", outputs=["where"])


@on_cluster.node(provides="where", device="cluster")
def where() -> str:
    import os
    return os.environ.get("SLURM_JOB_ID", "")


on_held = Flow("on_held", outputs=["x"])


@on_held.node(provides="x", device="heldlabel")
def never() -> int:
    return 1


on_parked = Flow("on_parked", outputs=["x"])


@on_parked.node(provides="x", device="parkedlabel")
def parked() -> int:
    return 1
'''


def test_a_run_requiring_label_cluster_gets_a_slurm_worker(slurm: SlurmCluster, redis_server: RedisServer,
                                                          workdir: Path) -> None:
    from fluksio import RunStatus, connect
    from tests.integration.support.cluster import Cluster

    e2e = workdir / "e2e"
    e2e.mkdir(exist_ok=True)
    flows = e2e / "slurm_flows.py"
    flows.write_text(FLOWS)
    common = {"kind": "slurm", "cpus": 1, "ram_mb": 256, "output": str(e2e / "%x-%j.out"),
              "prerun": [f"cd {e2e}", f"export PATH={VENV_BIN}:$PATH"]}
    (e2e / "provisioners.json").write_text(json.dumps([
        {"name": "cluster", "labels": ["cluster"], "attach_timeout_s": 120, "idle_timeout_s": 6, **common},
        {"name": "held", "labels": ["heldlabel"], "attach_timeout_s": 4, "idle_timeout_s": 6,
         "sbatch_args": ["--hold"], **common},
        {"name": "parked", "labels": ["parkedlabel"], "attach_timeout_s": 600, "idle_timeout_s": 6,
         "sbatch_args": ["--hold"], **common},
    ]))
    setup = Cluster(e2e, redis_server)
    setup.env.update({"FLUKSIO_FLOWS": str(flows), "FLUKSIO_PROVISIONERS": str(e2e / "provisioners.json"),
                      "SLURM_CONF": slurm.conf})
    settings = setup.settings().model_copy(update={"flows": [str(flows)]})
    try:
        setup.start_worker("driver", "--drivers-only")
        with connect(settings) as client:
            # 1. No worker carries 'cluster': the provisioner submits a job, its worker dials back, the run ends ok.
            record = client.submit("on_cluster").wait(timeout=180)
            assert record.status is RunStatus.OK, record.status_reason
            job_id = record.result["where"]
            assert job_id and record.nodes[0].machine == f"slurm-cluster-{job_id}"
            # ... and the job ends after the idle timeout.
            slurm.wait_state(job_id, {"COMPLETED", ""}, timeout=60)

            # 2. A job that cannot start is cancelled after attach_timeout_s, and the run says why.
            held = client.submit("on_held")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "was cancelled" not in (client.get(held.id).status_reason or ""):
                time.sleep(0.5)
            reason = client.get(held.id).status_reason or ""
            assert "was cancelled: its worker did not attach within 4s" in reason, reason
            assert "JobHeldUser" in reason

            # `fluksio placer` shows each profile: idle, or its job, Slurm state and pending time.
            shown = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "placer", "--json"], env=setup.env,
                                   capture_output=True, text=True, timeout=60)
            rows = {row["profile"]: row for row in json.loads(shown.stdout)["provisioners"]}
            assert set(rows) == {"cluster", "held", "parked"}
            assert rows["held"]["state"] == "idle" and "was cancelled" in rows["held"]["last"]

            client.cancel(held.id)

            # 3. Shutting the driver worker down cancels an outstanding request.
            parked = client.submit("on_parked")
            store = RedisRequestStore(redis.Redis.from_url(redis_server.url))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (store.outstanding("parked") is None
                                                   or store.outstanding("parked").job_id is None):
                time.sleep(0.2)
            pending = store.outstanding("parked")
            assert pending is not None and pending.job_id is not None
            # The driver re-asks once woken by the finished submission, and says so.
            while time.monotonic() < deadline and "asked Slurm for a machine" not in (
                    client.get(parked.id).status_reason or ""):
                time.sleep(0.2)
            assert "asked Slurm for a machine" in (client.get(parked.id).status_reason or "")
            setup.stop("driver")
            slurm.wait_state(pending.job_id, {"CANCELLED", ""}, timeout=20)
            client.cancel(parked.id)
    finally:
        setup.stop_all()
