"""The Slurm batch script, and the sbatch / squeue / scancel command lines, here and through ssh (no Slurm needed)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fluksio.provisioners.base import ProvisionError
from fluksio.provisioners.config import SlurmProfile
from fluksio.provisioners.jobs import JobState
from fluksio.provisioners.request import MachineRequest, RequestState
from fluksio.provisioners.slurm import CommandResult, SlurmProvisioner, run_command
from fluksio.provisioners.slurm_script import (
    batch_script,
    credentials_text,
    worker_command,
    worker_environment,
)
from fluksio.settings import Settings

#: The ``submitted`` fixture (conftest.py): ask, and wait for the submission to return.
Submitted = Callable[..., MachineRequest]


def profile(**changes: object) -> SlurmProfile:
    base: dict[str, object] = {"name": "cpu", "kind": "slurm", "cpus": 4, "ram_mb": 8000, "labels": ("cluster", "cpu"),
                               "idle_timeout_s": 120, "attach_timeout_s": 60}
    return SlurmProfile.model_validate({**base, **changes})


@pytest.fixture
def settings() -> Settings:
    return Settings(broker_url="redis://:s3cret@10.0.0.5:6379/0", database_url="postgresql://u@db/fluksio",
                    artifacts_dir=Path("shared/artifacts"), flows=["flows/train.py:flow", "mypkg.flows"],
                    heartbeat_interval_s=1.5, machine_name="laptop", labels=["local"], cpus=2,
                    provisioners=Path("config/provisioners.json"))


class FakeRunner:
    """Records every command line; answers from a queue of results (or by the program's name)."""

    def __init__(self, *answers: CommandResult) -> None:
        self.calls: list[tuple[list[str], str | None, float]] = []
        self.answers = list(answers)

    def __call__(self, argv: list[str], stdin: str | None, timeout_s: float) -> CommandResult:
        self.calls.append((argv, stdin, timeout_s))
        return self.answers.pop(0) if self.answers else CommandResult(0, "", "")


def ok(stdout: str = "") -> CommandResult:
    return CommandResult(0, stdout, "")


# -- the script ---------------------------------------------------------------------------------------


def test_the_script_asks_slurm_for_the_profile_and_runs_a_worker(settings: Settings, tmp_path: Path) -> None:
    script = batch_script(profile(partition="short", account="proj", time_limit="2:00:00", gpus=2,
                                  sbatch_args=("--qos=high", "--constraint=a100"), output="/scratch/%x-%j.out"),
                          worker_environment(settings, tmp_path), "/home/me/.fluksio/credentials/r1.env")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    sbatch = [line for line in lines if line.startswith("#SBATCH")]
    assert sbatch == [
        "#SBATCH --job-name=fluksio-cpu", "#SBATCH --nodes=1", "#SBATCH --ntasks=1", "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=8000M", "#SBATCH --gres=gpu:2", "#SBATCH --time=2:00:00", "#SBATCH --partition=short",
        "#SBATCH --account=proj", "#SBATCH --output=/scratch/%x-%j.out", "#SBATCH --no-requeue",
        "#SBATCH --qos=high",
        "#SBATCH --constraint=a100",
    ]
    # Every #SBATCH line comes before the first command (sbatch stops reading them there).
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert all(lines.index(line) < first_command for line in sbatch)
    assert lines[-1] == (
        'exec fluksio worker --name "slurm-cpu-${SLURM_JOB_ID}" --labels cluster,cpu --cpus 4 '
        '--gpus "${CUDA_VISIBLE_DEVICES:?Slurm gave this job no GPUs; is gres/gpu configured?}" '
        "--ram-mb 8000 --idle-timeout 120 --loglevel info"
    )


def test_optional_sbatch_lines_are_left_out(settings: Settings, tmp_path: Path) -> None:
    script = batch_script(profile(ram_mb=0, labels=()), worker_environment(settings, tmp_path), "/c/r1.env")
    for absent in ("--mem", "--gres", "--time", "--partition", "--account"):
        assert f"#SBATCH {absent}" not in script
    assert "#SBATCH --output=%x-%j.out" in script
    assert script.splitlines()[-1] == ('exec fluksio worker --name "slurm-cpu-${SLURM_JOB_ID}" --cpus 4 '
                                       "--gpus none --ram-mb 0 --idle-timeout 120 --loglevel info")


def test_the_installation_settings_are_exported_and_machine_settings_are_not(settings: Settings,
                                                                            tmp_path: Path) -> None:
    env = worker_environment(settings, tmp_path)
    assert env["FLUKSIO_BROKER_URL"] == "redis://:s3cret@10.0.0.5:6379/0"
    assert env["FLUKSIO_DATABASE_URL"] == "postgresql://u@db/fluksio"
    assert env["FLUKSIO_HEARTBEAT_INTERVAL_S"] == "1.5"
    # Relative paths become absolute against the submitting directory; module names stay.
    assert env["FLUKSIO_ARTIFACTS_DIR"] == str(tmp_path / "shared/artifacts")
    assert env["FLUKSIO_FLOWS"] == f"{tmp_path / 'flows/train.py'}:flow,mypkg.flows"
    for machine_only in ("MACHINE_NAME", "LABELS", "CPUS", "RAM_MB", "PROVISIONERS"):
        assert f"FLUKSIO_{machine_only}" not in env
    assert "FLUKSIO_RESULT_BACKEND" not in env  # unset stays unset
    assert "FLUKSIO_STALE_AFTER_S" not in env and "FLUKSIO_AUTO_RESUME" not in env  # defaults stay unsaid


def test_a_setting_that_differs_from_its_default_is_exported(tmp_path: Path) -> None:
    env = worker_environment(Settings(broker_url="redis://h:1/0", auto_resume=False, stale_after_s=30), tmp_path)
    # Relative paths are always exported, made absolute, even at their defaults.
    assert env == {"FLUKSIO_BROKER_URL": "redis://h:1/0", "FLUKSIO_AUTO_RESUME": "false",
                   "FLUKSIO_STALE_AFTER_S": "30.0", "FLUKSIO_ARTIFACTS_DIR": f"{tmp_path}/.fluksio/artifacts",
                   "FLUKSIO_DATABASE_URL": f"sqlite:///{tmp_path}/.fluksio/fluksio.db"}


def test_an_object_store_url_is_exported_as_it_is(tmp_path: Path) -> None:
    env = worker_environment(Settings(artifacts_dir="s3://bucket/fluksio"), tmp_path)
    assert env["FLUKSIO_ARTIFACTS_DIR"] == "s3://bucket/fluksio"


def test_a_relative_sqlite_file_is_made_absolute(tmp_path: Path) -> None:
    env = worker_environment(Settings(database_url="sqlite:///.fluksio/fluksio.db"), tmp_path)
    assert env["FLUKSIO_DATABASE_URL"] == f"sqlite:///{tmp_path}/.fluksio/fluksio.db"
    env = worker_environment(Settings(database_url="sqlite:////abs/f.db"), tmp_path)
    assert env["FLUKSIO_DATABASE_URL"] == "sqlite:////abs/f.db"


def test_the_script_runs_the_worker_with_the_settings_and_prerun(settings: Settings, tmp_path: Path) -> None:
    """Run the script with bash and a stand-in `fluksio` that reports its arguments and environment;
    the broker URL (it has a password) comes from the credentials file, which the script removes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    report = tmp_path / "report.json"
    fake = bin_dir / "fluksio"
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    "env = {k: v for k, v in os.environ.items() if k.startswith(('FLUKSIO_', 'PRE'))}\n"
                    f"json.dump({{'argv': sys.argv[1:], 'env': env}}, open({str(report)!r}, 'w'))\n")
    fake.chmod(0o755)
    environment = worker_environment(settings, tmp_path)
    credentials = tmp_path / "credentials.env"
    credentials.write_text(credentials_text({"FLUKSIO_BROKER_URL": environment["FLUKSIO_BROKER_URL"]}))
    script = batch_script(profile(prerun=(f"export PATH={bin_dir}:$PATH", "export PRERUN_RAN=yes",
                                          "export FLUKSIO_ARTIFACTS_DIR=/cluster/artifacts")),
                          environment, str(credentials))
    assert "s3cret" not in script
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "4242", "FLUKSIO_STALE_AFTER_S": "999",
           "FLUKSIO_BOGUS": "x"}
    done = subprocess.run(["bash", "-s"], input=script, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    seen = json.loads(report.read_text())
    assert seen["argv"] == ["worker", "--name", "slurm-cpu-4242", "--labels", "cluster,cpu", "--cpus", "4",
                            "--gpus", "none", "--ram-mb", "8000", "--idle-timeout", "120", "--loglevel", "info"]
    assert seen["env"]["FLUKSIO_BROKER_URL"] == "redis://:s3cret@10.0.0.5:6379/0"
    assert seen["env"]["FLUKSIO_DATABASE_URL"] == "postgresql://u@db/fluksio"  # no password: inline
    assert not credentials.exists()  # read, then removed
    assert seen["env"]["PRERUN_RAN"] == "yes"
    assert seen["env"]["FLUKSIO_ARTIFACTS_DIR"] == "/cluster/artifacts"  # prerun may override on purpose
    # The submitting shell's value does not leak in; the installation's (the default) is left unsaid.
    assert "FLUKSIO_STALE_AFTER_S" not in seen["env"]
    assert "FLUKSIO_BOGUS" not in seen["env"]  # the submitting shell's variables do not leak in


def test_a_gpu_job_without_gpus_from_slurm_fails_loudly(settings: Settings, tmp_path: Path) -> None:
    script = batch_script(profile(gpus=1), {})
    done = subprocess.run(["bash", "-s"], input=script, env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "Slurm gave this job no GPUs" in done.stderr


def test_values_with_shell_characters_are_quoted(tmp_path: Path) -> None:
    settings = Settings(broker_url="redis://:p'a$s`w@h:1/0", artifacts_dir=Path("/data/it's $here"))
    environment = worker_environment(settings, tmp_path)
    script = batch_script(profile(), environment, "/c/it's $mine.env")
    line = next(line for line in script.splitlines() if line.startswith("export FLUKSIO_ARTIFACTS_DIR="))
    assert shlex.split(line.removeprefix("export "))[0] == "FLUKSIO_ARTIFACTS_DIR=/data/it's $here"
    assert ". '/c/it'\"'\"'s $mine.env'" in script.splitlines()
    text = credentials_text({"FLUKSIO_BROKER_URL": environment["FLUKSIO_BROKER_URL"]})
    line = next(line for line in text.splitlines() if line.startswith("export FLUKSIO_BROKER_URL="))
    assert shlex.split(line.removeprefix("export "))[0] == "FLUKSIO_BROKER_URL=redis://:p'a$s`w@h:1/0"


def test_worker_command_formats_fractional_timeouts() -> None:
    assert "--idle-timeout 2.5 " in worker_command(profile(idle_timeout_s=2.5))


# -- the commands -------------------------------------------------------------------------------------


def provisioner(settings: Settings, runner: FakeRunner, cwd: Path = Path("/home/me/project"),
                **changes: object) -> SlurmProvisioner:
    """Locally submitting tests pass a temporary ``cwd``: the credentials file is written under it."""
    return SlurmProvisioner([profile(**changes)], settings, runner=runner, cwd=cwd)


def test_local_submission_runs_sbatch_here_with_the_script_on_stdin(settings: Settings, tmp_path: Path,
                                                                    submitted: Submitted) -> None:
    runner = FakeRunner(ok("1234\n"))
    slurm = provisioner(settings, runner, tmp_path)
    request = submitted(slurm, "cpu", "run r1 node n waits for a worker labelled 'cluster'")
    assert (request.job_id, request.machine, request.state) == ("1234", "slurm-cpu-1234", RequestState.PENDING)
    assert request.output == f"{tmp_path}/fluksio-cpu-1234.out"
    [(argv, stdin, timeout)] = runner.calls
    assert argv == ["sbatch", "--parsable"]
    credentials = slurm.credentials_path(slurm.profiles["cpu"], request)
    assert credentials == f"{tmp_path}/.fluksio/credentials/{request.id}.env"
    assert stdin == slurm.script(slurm.profiles["cpu"], credentials) and stdin.startswith("#!/bin/bash")
    assert 0 < timeout <= 120


def test_ssh_submission_runs_sbatch_on_the_login_node(settings: Settings, submitted: Submitted) -> None:
    runner = FakeRunner(ok("/home/me/.fluksio/credentials\n"), ok("88;cluster1\n"))
    slurm = provisioner(settings, runner, host="me@login.example.org")
    request = submitted(slurm, "cpu")
    assert request.job_id == "88" and request.output == "me@login.example.org:fluksio-cpu-88.out"
    [_write_credentials, (argv, stdin, _)] = runner.calls
    assert argv == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "me@login.example.org",
                    "sbatch --parsable"]
    assert stdin is not None and "exec fluksio worker" in stdin
    assert f". /home/me/.fluksio/credentials/{request.id}.env" in stdin.splitlines()


def test_squeue_and_scancel_command_lines_here_and_through_ssh(tmp_path: Path, submitted: Submitted) -> None:
    settings = Settings(broker_url="redis://10.0.0.5:6379/0")  # no password: no credentials file to write
    for host, wrap in (("", lambda cmd: cmd), ("login1", lambda cmd: ["ssh", "-o", "BatchMode=yes", "-o",
                                                                      "ConnectTimeout=15", "login1", shlex.join(cmd)])):
        runner = FakeRunner(ok("5\n"), ok("5|PENDING|JobHeldUser\n"))
        now = [1000.0]
        slurm = SlurmProvisioner([profile(host=host)], settings, runner=runner, clock=lambda: now[0], cwd=tmp_path)
        submitted(slurm, "cpu")
        slurm.poll()
        squeue = ["squeue", "--noheader", "--states=all", "--jobs=5", "--format=%i|%T|%r"]
        assert runner.calls[1][0] == wrap(squeue)
        now[0] += 61  # past attach_timeout_s
        runner.answers = [ok("5|PENDING|JobHeldUser\n"), ok()]
        [cancelled] = slurm.poll()
        assert runner.calls[-1][0] == wrap(["scancel", "5"])
        assert cancelled.state is RequestState.CANCELLED
        assert cancelled.outcome == ("Slurm job 5 (profile 'cpu') was cancelled: its worker did not attach "
                                     "within 60s (Slurm said: PENDING, JobHeldUser)")


def test_the_ssh_remote_command_quotes_the_squeue_format(settings: Settings) -> None:
    slurm = provisioner(settings, FakeRunner(), host="login1")
    remote = slurm.command(slurm.profiles["cpu"], ["squeue", "--format=%i|%T|%r"])[-1]
    assert remote == "squeue '--format=%i|%T|%r'"  # the | reaches squeue, not the remote shell


def test_a_refusing_sbatch_fails_the_request_with_its_words(settings: Settings, submitted: Submitted) -> None:
    runner = FakeRunner(CommandResult(1, "", "sbatch: error: Batch job submission failed: "
                                             "Requested node configuration is not available\n"))
    runner.answers.insert(0, ok("/home/me/.fluksio/credentials\n"))  # the credentials file is written first
    slurm = provisioner(settings, runner, host="login1")
    request = submitted(slurm, "cpu")
    assert request.state is RequestState.FAILED and request.job_id is None
    # ... and removed again, since no job will read it.
    assert runner.calls[-1][0][-1] == f"rm -f -- .fluksio/credentials/{request.id}.env"
    assert request.outcome == ("could not submit a Slurm job for profile 'cpu': sbatch on login1 refused the "
                               "job: sbatch: error: Batch job submission failed: Requested node configuration "
                               "is not available (exit 1)")


def test_an_answer_that_is_not_a_job_id_is_an_error(settings: Settings, tmp_path: Path,
                                                     submitted: Submitted) -> None:
    request = submitted(provisioner(settings, FakeRunner(ok("Submitted batch job 12\n")), tmp_path), "cpu")
    assert request.state is RequestState.FAILED
    assert "sbatch answered 'Submitted batch job 12', not a job id" in (request.outcome or "")
    assert list((tmp_path / ".fluksio/credentials").iterdir()) == []  # no job will read it: removed


def test_squeue_output_is_parsed_and_unknown_jobs_are_gone(settings: Settings) -> None:
    slurm = provisioner(settings, FakeRunner(ok("7|RUNNING|None\n9|COMPLETED|None\n")))
    states = slurm._states(slurm.profiles["cpu"], ["7", "8", "9"])
    assert states == {"7": JobState("RUNNING", "None"), "9": JobState("COMPLETED", "None")}
    assert states["9"].ended and not states["7"].ended
    slurm.runner = FakeRunner(CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n"))
    assert slurm._states(slurm.profiles["cpu"], ["8"]) == {}


def test_a_squeue_that_cannot_reach_the_controller_is_an_error(settings: Settings) -> None:
    slurm = provisioner(settings, FakeRunner(CommandResult(
        1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")))
    with pytest.raises(ProvisionError, match="squeue failed: slurm_load_jobs error: Unable to contact slurm"):
        slurm._states(slurm.profiles["cpu"], ["1"])


def test_scancel_of_a_finished_job_is_no_error(settings: Settings) -> None:
    slurm = provisioner(settings, FakeRunner(CommandResult(1, "", "scancel: error: Kill job error on job id 5: "
                                                                  "Job/step already completing or completed\n")))
    slurm._cancel(slurm.profiles["cpu"], "5")
    slurm.runner = FakeRunner(CommandResult(1, "", "scancel: error: Access/permission denied\n"))
    with pytest.raises(ProvisionError, match="scancel 5 failed: scancel: error: Access/permission denied"):
        slurm._cancel(slurm.profiles["cpu"], "5")


def test_run_command_turns_a_missing_program_and_a_timeout_into_clear_errors() -> None:
    with pytest.raises(ProvisionError, match="no-such-sbatch is not installed on this host"):
        run_command(["no-such-sbatch", "--parsable"], None, 5)
    with pytest.raises(ProvisionError, match=r"`sleep 5` did not finish within 0.2s"):
        run_command(["sleep", "5"], None, 0.2)
    assert run_command(["cat"], "hello", 5) == CommandResult(0, "hello", "")


def test_a_provisioned_worker_runs_shipped_code_as_the_installation_says():
    """Code that travels with the run: the job's worker gets the installation's trust setting and cache size."""
    env = worker_environment(Settings(broker_url="redis://h:1/0", accept_code="signed", code_cache_mb=512), Path("/w"))
    assert env["FLUKSIO_ACCEPT_CODE"] == "signed" and env["FLUKSIO_CODE_CACHE_MB"] == "512.0"
    assert "FLUKSIO_ACCEPT_CODE" not in worker_environment(Settings(broker_url="redis://h:1/0"), Path("/w"))
