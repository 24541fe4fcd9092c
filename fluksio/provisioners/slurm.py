"""The Slurm provisioner: ``sbatch`` a job whose payload is a ``fluksio worker``, read its state with
``squeue``, cancel it with ``scancel``.

With a profile's ``host`` set, each command runs on that login node through the
system's ``ssh`` (batch mode: a key or agent, never a password prompt), the
script on standard input so no file is left on either side; without, here.
Every command has a time limit, and every failure becomes a :class:`ProvisionError`
that says what was run and what it answered.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fluksio.provisioners.base import (
    AttachedCheck,
    JobState,
    Provisioner,
    ProvisionError,
)
from fluksio.provisioners.config import SlurmProfile
from fluksio.provisioners.request import MachineRequest
from fluksio.provisioners.slurm_script import batch_script, worker_environment
from fluksio.provisioners.store import RequestStore
from fluksio.settings import Settings

#: Time limits of each command, in seconds (through ssh they include connecting).
SBATCH_TIMEOUT_S = 60.0
SQUEUE_TIMEOUT_S = 30.0
SCANCEL_TIMEOUT_S = 30.0
#: ssh options: never prompt (a prompt would hang a driver), give up on an unreachable host quickly.
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=15")
#: squeue's answer for a job it no longer knows, and scancel's for one that already ended.
_GONE = ("Invalid job id", "already completing or completed", "Job has already finished")


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


#: ``runner(argv, stdin, timeout_s)``: runs a command; tests pass a fake one.
Runner = Callable[[list[str], str | None, float], CommandResult]


def run_command(argv: list[str], stdin: str | None, timeout_s: float) -> CommandResult:
    """Run ``argv`` with a time limit; a missing program or a timeout is a :class:`ProvisionError`."""
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        if argv[0] == "ssh":
            raise ProvisionError("ssh is not installed on this host (a profile with a host reaches its login "
                                 "node through the system's ssh client)") from None
        raise ProvisionError(f"{argv[0]} is not installed on this host (Slurm's client commands are needed "
                             "here, or set the profile's host to a login node that has them)") from None
    except subprocess.TimeoutExpired:
        raise ProvisionError(f"`{shlex.join(argv)}` did not finish within {timeout_s:g}s") from None
    except OSError as exc:
        raise ProvisionError(f"cannot run {argv[0]}: {exc}") from None
    return CommandResult(done.returncode, done.stdout, done.stderr)


class SlurmProvisioner(Provisioner):
    kind = "slurm"

    def __init__(self, profiles: Sequence[SlurmProfile], settings: Settings, store: RequestStore | None = None,
                 is_attached: AttachedCheck | None = None, *, runner: Runner = run_command,
                 cwd: Path | None = None, **kwargs: Any) -> None:
        """``kwargs``: the base's ``clock``, ``retry_after_s`` and ``owner``."""
        super().__init__(profiles, store, is_attached, **kwargs)
        self.settings = settings
        self.runner = runner
        #: The submitting directory: a local job starts there; relative settings are made absolute against it.
        self.cwd = cwd or Path.cwd()

    def script(self, profile: SlurmProfile) -> str:
        """The batch script a job of ``profile`` runs."""
        return batch_script(profile, worker_environment(self.settings, self.cwd))

    def command(self, profile: SlurmProfile, argv: list[str]) -> list[str]:
        """``argv`` as run for ``profile``: as is, or through ssh on its login node."""
        if not profile.host:
            return argv
        return ["ssh", *SSH_OPTIONS, profile.host, shlex.join(argv)]

    def output_of(self, profile: SlurmProfile, job_id: str) -> str:
        path = profile.output.replace("%j", job_id).replace("%x", profile.job_name)
        if profile.host:
            return f"{profile.host}:{path}"
        return str(Path(path) if Path(path).is_absolute() else self.cwd / path)

    # -- the three commands -----------------------------------------------------------------------

    def _submit(self, profile: SlurmProfile, request: MachineRequest) -> str:
        result = self._run(profile, ["sbatch", "--parsable"], self.script(profile), SBATCH_TIMEOUT_S)
        if result.returncode != 0:
            raise ProvisionError(f"sbatch{self._where(profile)} refused the job: {_said(result)}")
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        job_id = lines[-1].split(";")[0] if lines else ""  # --parsable: "id" or "id;cluster"
        if not job_id.isdigit():
            raise ProvisionError(f"sbatch{self._where(profile)} answered {result.stdout.strip()!r}, not a job id")
        return job_id

    def _states(self, profile: SlurmProfile, job_ids: list[str]) -> dict[str, JobState]:
        # -t all: a job that just ended is still listed (COMPLETED, CANCELLED …) until Slurm purges it.
        argv = ["squeue", "--noheader", "--states=all", f"--jobs={','.join(job_ids)}", "--format=%i|%T|%r"]
        result = self._run(profile, argv, None, SQUEUE_TIMEOUT_S)
        if result.returncode != 0:
            if any(text in result.stderr for text in _GONE):
                return {}  # none of them is known any more
            raise ProvisionError(f"squeue{self._where(profile)} failed: {_said(result)}")
        states = {}
        for line in result.stdout.splitlines():
            fields = line.strip().split("|")
            if len(fields) == 3 and fields[0]:
                states[fields[0]] = JobState(fields[1], fields[2] or None)
        return states

    def _cancel(self, profile: SlurmProfile, job_id: str) -> None:
        result = self._run(profile, ["scancel", job_id], None, SCANCEL_TIMEOUT_S)
        if result.returncode != 0 and not any(text in result.stderr for text in _GONE):
            raise ProvisionError(f"scancel {job_id}{self._where(profile)} failed: {_said(result)}")

    def _run(self, profile: SlurmProfile, argv: list[str], stdin: str | None, timeout_s: float) -> CommandResult:
        return self.runner(self.command(profile, argv), stdin, timeout_s)

    @staticmethod
    def _where(profile: SlurmProfile) -> str:
        return f" on {profile.host}" if profile.host else ""


def _said(result: CommandResult) -> str:
    text = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()
    return " / ".join(text[-3:]) + f" (exit {result.returncode})"
