"""Settings that carry a password never enter a Slurm batch script: they wait in a private credentials
file (here, or on the login node through ssh) that the job reads and removes, and that the provisioner
removes once the request stops waiting. No Slurm needed: the scripts run under bash here."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fluksio.provisioners.config import SlurmProfile
from fluksio.provisioners.credentials import write_private
from fluksio.provisioners.request import MachineRequest, RequestState
from fluksio.provisioners.slurm import SSH_OPTIONS, CommandResult, SlurmProvisioner, run_command
from fluksio.provisioners.slurm_script import batch_script, secret_environment, worker_environment
from fluksio.settings import Settings

#: The ``submitted`` fixture (conftest.py): ask, and wait for the submission to return.
Submitted = Callable[..., MachineRequest]

#: Settings whose URLs carry passwords, as users write them; and the passwords a script must not show.
SECRET_SETTINGS = {
    "redis": ({"broker_url": "redis://:r3dis-pw@10.0.0.5:6379/0"}, ["r3dis-pw"]),
    "redis with a user": ({"broker_url": "redis://fluksio:us3r-pw@redis.lab:6379/1"}, ["us3r-pw"]),
    "rediss": ({"broker_url": "rediss://:tl5-pw@redis.lab:6380/0?ssl_cert_reqs=required"}, ["tl5-pw"]),
    "postgres": ({"broker_url": "redis://10.0.0.5:6379/0",
                  "database_url": "postgresql+psycopg://fluksio:pg-pw@db.lab:5432/fluksio"}, ["pg-pw"]),
    "all three": ({"broker_url": "redis://:b-pw@h:6379/0", "result_backend": "redis://:rb-pw@h:6379/2",
                   "database_url": "postgresql://u:db-pw@db/fluksio"}, ["b-pw", "rb-pw", "db-pw"]),
}


def profile(**changes: object) -> SlurmProfile:
    return SlurmProfile.model_validate({"name": "cpu", "kind": "slurm", "cpus": 2, "labels": ["cluster"],
                                        "attach_timeout_s": 60, **changes})


def ok(stdout: str = "") -> CommandResult:
    return CommandResult(0, stdout, "")


class Cluster:
    """Stands in for sbatch, squeue and scancel, here or through ssh. Anything else sent through ssh
    (writing and removing the credentials file) really runs, under bash as the login shell, in a pretend
    home folder, as sshd would run it."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.calls: list[list[str]] = []
        self.scripts: list[str] = []
        self.squeue = "5|PENDING|Priority\n"

    def __call__(self, argv: list[str], stdin: str | None, timeout_s: float) -> CommandResult:
        self.calls.append(argv)
        remote = argv[0] == "ssh"
        if remote:
            assert argv[1:len(SSH_OPTIONS) + 1] == list(SSH_OPTIONS)
        command = shlex.split(argv[-1]) if remote else argv
        if command[0] == "sbatch":
            self.scripts.append(stdin or "")
            return ok("5\n")
        if command[0] == "squeue":
            return ok(self.squeue)
        if command[0] == "scancel":
            return ok()
        assert remote, f"only ssh runs anything else: {argv}"
        done = subprocess.run(["bash", "-c", argv[-1]], input=stdin, cwd=self.home, capture_output=True, text=True,
                              env={"HOME": str(self.home), "PATH": os.environ["PATH"]}, timeout=30)
        return CommandResult(done.returncode, done.stdout, done.stderr)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def slurm(tmp_path: Path, settings: Settings, **changes: object) -> tuple[SlurmProvisioner, Cluster, Clock]:
    cluster, clock = Cluster(tmp_path / "home"), Clock()
    cluster.home.mkdir(exist_ok=True)
    provisioner = SlurmProvisioner([profile(**changes)], settings, runner=cluster, clock=clock,
                                   cwd=tmp_path / "project")
    return provisioner, cluster, clock


def run_script(script: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """Run a batch script under bash, its `fluksio` a stand-in that reports the FLUKSIO_* it was given."""
    bin_dir, report = tmp_path / "bin", tmp_path / "report.json"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "fluksio"
    fake.write_text(f"#!{sys.executable}\nimport json, os\n"
                    "env = {k: v for k, v in os.environ.items() if k.startswith('FLUKSIO_')}\n"
                    f"json.dump(env, open({str(report)!r}, 'w'))\n")
    fake.chmod(0o755)
    done = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "5"})
    return done, (json.loads(report.read_text()) if report.exists() else {})


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- which settings are secret ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", SECRET_SETTINGS)
def test_urls_with_passwords_go_to_the_credentials_file_and_nothing_else_does(case: str, tmp_path: Path) -> None:
    fields, passwords = SECRET_SETTINGS[case]
    environment = worker_environment(Settings(**fields), tmp_path)
    secrets = secret_environment(environment)
    assert secrets == {f"FLUKSIO_{name.upper()}": value for name, value in fields.items()
                       if any(password in value for password in passwords)}
    script = batch_script(profile(), environment, "/home/me/.fluksio/credentials/r.env")
    assert not any(password in script for password in passwords), script
    # What has no password stays in the script, as before.
    for key, value in environment.items():
        if key not in secrets:
            assert f"export {key}={shlex.quote(value)}" in script.splitlines()


def test_a_script_is_never_written_with_a_password_in_it(tmp_path: Path) -> None:
    environment = worker_environment(Settings(broker_url="redis://:pw@h:6379/0"), tmp_path)
    with pytest.raises(ValueError, match="FLUKSIO_BROKER_URL carries a password"):
        batch_script(profile(), environment)
    # Without any password there is no credentials file to name.
    plain = worker_environment(Settings(broker_url="redis://h:6379/0"), tmp_path)
    assert ". " not in batch_script(profile(), plain) and "credentials" not in batch_script(profile(), plain)


# -- local sbatch -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", SECRET_SETTINGS)
def test_local_submission_writes_a_private_credentials_file_and_a_script_without_passwords(
        case: str, tmp_path: Path, submitted: Submitted) -> None:
    fields, passwords = SECRET_SETTINGS[case]
    provisioner, cluster, _ = slurm(tmp_path, Settings(**fields))
    request = submitted(provisioner, "cpu")
    assert request.job_id == "5", request.outcome
    [script] = cluster.scripts
    assert not any(password in script for password in passwords), script
    assert not any(password in part for password in passwords for argv in cluster.calls for part in argv)

    path = tmp_path / "project" / ".fluksio" / "credentials" / f"{request.id}.env"
    assert f". {path}" in script.splitlines()
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert path.stat().st_uid == os.getuid()
    # The file gives the worker exactly the settings the script left out.
    done, seen = run_script(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert seen == worker_environment(provisioner.settings, provisioner.cwd)
    assert not path.exists()  # the job removed it once read


def test_a_job_started_without_its_credentials_file_says_so(tmp_path: Path, submitted: Submitted) -> None:
    provisioner, cluster, _ = slurm(tmp_path, Settings(broker_url="redis://:pw@h:6379/0"))
    request = submitted(provisioner, "cpu")
    Path(provisioner.credentials_path(provisioner.profiles["cpu"], request)).unlink()
    done, seen = run_script(cluster.scripts[0], tmp_path)
    assert done.returncode == 1 and seen == {}
    assert f"fluksio: cannot read {provisioner.credentials_path(provisioner.profiles['cpu'], request)}, " \
           "which holds FLUKSIO_BROKER_URL" in done.stderr


def test_cancelling_a_job_that_never_started_removes_its_credentials(tmp_path: Path, submitted: Submitted) -> None:
    provisioner, _, clock = slurm(tmp_path, Settings(broker_url="redis://:pw@h:6379/0"))
    request = submitted(provisioner, "cpu")
    path = Path(provisioner.credentials_path(provisioner.profiles["cpu"], request))
    assert path.exists()
    provisioner.poll()
    assert path.exists()  # still pending: the job will need it
    clock.now += 61  # past attach_timeout_s
    [cancelled] = provisioner.poll()
    assert cancelled.state is RequestState.CANCELLED
    assert not path.exists()


def test_shutting_down_removes_the_credentials_of_outstanding_requests(tmp_path: Path, submitted: Submitted) -> None:
    provisioner, _, _ = slurm(tmp_path, Settings(broker_url="redis://:pw@h:6379/0"))
    path = Path(provisioner.credentials_path(provisioner.profiles["cpu"], submitted(provisioner, "cpu")))
    [cancelled] = provisioner.shutdown()
    assert cancelled.state is RequestState.CANCELLED and not path.exists()


def test_a_job_that_ended_before_attaching_leaves_no_credentials(tmp_path: Path, submitted: Submitted) -> None:
    provisioner, cluster, _ = slurm(tmp_path, Settings(broker_url="redis://:pw@h:6379/0"))
    path = Path(provisioner.credentials_path(provisioner.profiles["cpu"], submitted(provisioner, "cpu")))
    cluster.squeue = "5|FAILED|NonZeroExitCode\n"  # e.g. its prerun failed before the script read the file
    [failed] = provisioner.poll()
    assert failed.state is RequestState.FAILED and not path.exists()


def test_a_refused_submission_leaves_no_credentials(tmp_path: Path, submitted: Submitted) -> None:
    def refuse(argv: list[str], stdin: str | None, timeout_s: float) -> CommandResult:
        return CommandResult(1, "", "sbatch: error: invalid partition specified: nope\n")

    provisioner = SlurmProvisioner([profile()], Settings(broker_url="redis://:pw@h:6379/0"), runner=refuse,
                                   cwd=tmp_path)
    request = submitted(provisioner, "cpu")
    assert request.state is RequestState.FAILED and "invalid partition" in (request.outcome or "")
    assert list((tmp_path / ".fluksio" / "credentials").iterdir()) == []


def test_a_submission_that_never_finished_leaves_no_credentials(tmp_path: Path) -> None:
    """A driver died between writing the file and sbatch answering: whoever gives the request up removes it."""
    provisioner, _, clock = slurm(tmp_path, Settings(broker_url="redis://:pw@h:6379/0"))
    stuck = MachineRequest(id="0123abcd", profile="cpu", reason="why", owner="dead", submitted_at=clock.now)
    assert provisioner.store.reserve(stuck) is None
    path = Path(provisioner.credentials_path(provisioner.profiles["cpu"], stuck))
    write_private(path.parent, path.name, "export FLUKSIO_BROKER_URL=x\n")
    clock.now += 61
    [failed] = provisioner.poll()
    assert failed.state is RequestState.FAILED and not path.exists()


def test_no_credentials_file_without_a_password(tmp_path: Path, submitted: Submitted) -> None:
    provisioner, cluster, clock = slurm(tmp_path, Settings(broker_url="redis://h:6379/0"))
    submitted(provisioner, "cpu")
    assert not (tmp_path / "project" / ".fluksio").exists()
    assert "export FLUKSIO_BROKER_URL=redis://h:6379/0" in cluster.scripts[0].splitlines()


def test_the_credentials_file_is_never_written_through_an_existing_file_or_link(tmp_path: Path) -> None:
    folder = tmp_path / "credentials"
    elsewhere = tmp_path / "elsewhere"
    write_private(folder, "a.env", "first\n")
    with pytest.raises(FileExistsError):
        write_private(folder, "a.env", "second\n")
    (folder / "b.env").symlink_to(elsewhere)
    with pytest.raises(OSError):
        write_private(folder, "b.env", "secret\n")
    assert (folder / "a.env").read_text() == "first\n" and not elsewhere.exists()
    # A folder someone left open is closed before anything is written into it.
    folder.chmod(0o755)
    write_private(folder, "c.env", "x\n")
    assert mode(folder) == 0o700 and mode(folder / "c.env") == 0o600


def test_sbatch_does_not_get_this_process_fluksio_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch hands its environment to the job, and Slurm keeps it in its records like the script."""
    monkeypatch.setenv("FLUKSIO_BROKER_URL", "redis://:env-pw@h:6379/0")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    shown = run_command(["env"], None, 10).stdout
    assert "env-pw" not in shown and "FLUKSIO_" not in shown
    assert "SLURM_CONF=/etc/slurm/slurm.conf" in shown.splitlines()


# -- sbatch through ssh -------------------------------------------------------------------------------------


def test_through_ssh_the_credentials_file_is_written_on_the_login_node(tmp_path: Path, submitted: Submitted) -> None:
    provisioner, cluster, clock = slurm(tmp_path, Settings(broker_url="redis://:ssh-pw@h:6379/0",
                                                           database_url="postgresql://u:db-pw@db/f"),
                                        host="me@login1")
    request = submitted(provisioner, "cpu")
    assert request.job_id == "5", request.outcome
    # Written on the login node, under its home (where sbatch runs and the job starts), never here.
    path = cluster.home / ".fluksio" / "credentials" / f"{request.id}.env"
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert not (tmp_path / "project").exists()
    # The passwords travel on ssh's standard input: neither a command line nor the script shows them.
    for password in ("ssh-pw", "db-pw"):
        assert not any(password in part for argv in cluster.calls for part in argv)
        assert password not in cluster.scripts[0]
    assert f". {path}" in cluster.scripts[0].splitlines()  # the absolute path the login node reported

    # The job (here, as if on a compute node sharing the home folder) reads it and removes it.
    done, seen = run_script(cluster.scripts[0], tmp_path)
    assert done.returncode == 0, done.stderr
    assert seen["FLUKSIO_BROKER_URL"] == "redis://:ssh-pw@h:6379/0"
    assert seen["FLUKSIO_DATABASE_URL"] == "postgresql://u:db-pw@db/f"
    assert not path.exists()


def test_through_ssh_cancelling_a_pending_job_removes_its_credentials_on_the_login_node(
        tmp_path: Path, submitted: Submitted) -> None:
    provisioner, cluster, clock = slurm(tmp_path, Settings(broker_url="redis://:pw@h:6379/0"), host="login1")
    request = submitted(provisioner, "cpu")
    path = cluster.home / ".fluksio" / "credentials" / f"{request.id}.env"
    assert path.exists()
    clock.now += 61
    [cancelled] = provisioner.poll()
    assert cancelled.state is RequestState.CANCELLED
    assert [shlex.split(argv[-1])[0] for argv in cluster.calls[-3:]] == ["squeue", "scancel", "rm"]
    assert not path.exists()


def test_through_ssh_a_login_node_that_cannot_write_the_file_fails_the_request(
        tmp_path: Path, submitted: Submitted) -> None:
    provisioner, cluster, _ = slurm(tmp_path, Settings(broker_url="redis://:pw@h:6379/0"), host="login1")
    (cluster.home / ".fluksio").write_text("not a folder")
    request = submitted(provisioner, "cpu")
    assert request.state is RequestState.FAILED and cluster.scripts == []  # nothing submitted
    assert (request.outcome or "").startswith("could not submit a Slurm job for profile 'cpu': cannot write the "
                                              "job's credentials file in ~/.fluksio/credentials on login1: ")


def test_through_ssh_a_slow_login_node_holds_no_caller_up_and_shutdown_leaves_nothing_behind(
        tmp_path: Path) -> None:
    """request() returns while ssh still runs sbatch (a driver's loop must go on refreshing its run's lease);
    a driver worker that shuts down meanwhile gets the job cancelled, and its credentials removed, once
    sbatch answers."""
    provisioner, cluster, _ = slurm(tmp_path, Settings(broker_url="redis://:pw@h:6379/0"), host="login1")
    answer, in_sbatch = threading.Event(), threading.Event()

    def slow_login_node(argv: list[str], stdin: str | None, timeout_s: float) -> CommandResult:
        if shlex.split(argv[-1])[0] == "sbatch":
            in_sbatch.set()
            assert answer.wait(30)
        return cluster(argv, stdin, timeout_s)

    provisioner.runner = slow_login_node
    started = time.monotonic()
    request = provisioner.request("cpu", "why")
    assert time.monotonic() - started < 1.0 and request.job_id is None
    assert in_sbatch.wait(5)
    path = cluster.home / ".fluksio" / "credentials" / f"{request.id}.env"
    assert path.exists()  # written before sbatch runs

    stopping = threading.Thread(target=provisioner.shutdown, kwargs={"timeout_s": 10})
    stopping.start()
    deadline = time.monotonic() + 5
    while provisioner.store.last("cpu") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert provisioner.store.last("cpu").state is RequestState.CANCELLED and stopping.is_alive()
    answer.set()
    stopping.join(10)
    assert not stopping.is_alive()
    assert [shlex.split(argv[-1]) for argv in cluster.calls[1:]] == [
        ["sbatch", "--parsable"], ["scancel", "5"], ["rm", "-f", "--", f".fluksio/credentials/{request.id}.env"]]
    assert not path.exists() and provisioner.store.live() == []


# -- TLS, signing and secrets -----------------------------------------------------------------------------


def test_a_slurm_job_gets_the_ca_and_signing_paths_and_never_a_password_or_a_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUKSIO_SECRET_HF_TOKEN", "hf_never_in_a_script")
    settings = Settings(broker_url="rediss://:tl5-pw@redis.lab:6380/0?ssl_ca_certs=/etc/fluksio/ca.pem",
                        database_url="postgresql://u@db/fluksio?sslmode=verify-full&sslrootcert=/etc/fluksio/pg.pem",
                        signing_key=Path("keys/node.key"), signing_certificate=Path("keys/node.pem"),
                        signing_cert_store=Path("/etc/fluksio/trusted"), secrets_dir=Path("secrets"),
                        smtp_host="mail", smtp_password="smtp-pw", ui_basic_auth="ada:ui-pw")
    environment = worker_environment(settings, tmp_path)
    script = batch_script(profile(), environment, "/home/me/.fluksio/credentials/r.env")
    credentials = secret_environment(environment)
    # The CA paths travel with their URL: in the credentials file when the URL has a password, else the script.
    assert credentials["FLUKSIO_BROKER_URL"].endswith("?ssl_ca_certs=/etc/fluksio/ca.pem")
    assert "sslmode=verify-full&sslrootcert=/etc/fluksio/pg.pem" in script
    # Paths the worker reads are made absolute against the submitting directory.
    assert f"export FLUKSIO_SIGNING_KEY={tmp_path / 'keys/node.key'}" in script
    assert f"export FLUKSIO_SECRETS_DIR={tmp_path / 'secrets'}" in script
    assert "export FLUKSIO_SIGNING_CERT_STORE=/etc/fluksio/trusted" in script
    for never in ("tl5-pw", "smtp-pw", "ui-pw", "hf_never_in_a_script", "FLUKSIO_SECRET_HF_TOKEN"):
        assert never not in script
    # Passwords the job never needs (alerts' SMTP, the explorer's) and secrets' values are not even exported.
    exported = "".join(environment) + "".join(environment.values())
    for never in ("smtp-pw", "ui-pw", "hf_never_in_a_script", "FLUKSIO_SECRET_HF_TOKEN"):
        assert never not in exported
