"""The Slurm provisioner: ``sbatch`` a job whose payload is a ``fluksio worker``, read its state with
``squeue``, cancel it with ``scancel``.

With a profile's ``host`` set, each command runs on that login node through the
system's ``ssh`` (batch mode: a key or agent, never a password prompt), the
script on standard input; without, here. Every command has a time limit, and
every failure becomes a :class:`ProvisionError` that says what was run and what
it answered.

Settings that carry a password never enter the script (Slurm keeps scripts in
its records) nor ``sbatch``'s environment (Slurm keeps that too): they go into a
credentials file on the submitting side (here, or on the login node through
ssh; see credentials.py), which the job reads and removes when it starts, and
the provisioner removes once the request stops waiting for its machine.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fluksio.provisioners.base import AttachedCheck, Provisioner, ProvisionError
from fluksio.provisioners.config import SlurmProfile
from fluksio.provisioners.credentials import CREDENTIALS_DIR, REMOTE_WRITE, file_name, write_private
from fluksio.provisioners.jobs import JobState
from fluksio.provisioners.request import MachineRequest
from fluksio.provisioners.slurm_script import (
    batch_script,
    credentials_text,
    secret_environment,
    worker_environment,
)
from fluksio.provisioners.store import RequestStore
from fluksio.settings import Settings

log = logging.getLogger(__name__)

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
    """Run ``argv`` with a time limit; a missing program or a timeout is a :class:`ProvisionError`.

    The command runs without this process's ``FLUKSIO_*`` variables: ``sbatch`` hands its environment to
    the job, and Slurm keeps that in its records like the script (the script sets the worker's own).
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("FLUKSIO_")}
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False,
                              env=env)
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
    #: A submission writes the credentials file and runs sbatch; one ended meanwhile then runs scancel
    #: and removes the file: shutdown waits for all four.
    submission_limit_s = 2 * SBATCH_TIMEOUT_S + 2 * SCANCEL_TIMEOUT_S

    def __init__(self, profiles: Sequence[SlurmProfile], settings: Settings, store: RequestStore | None = None,
                 is_attached: AttachedCheck | None = None, *, runner: Runner = run_command,
                 cwd: Path | None = None, **kwargs: Any) -> None:
        """``kwargs``: the base's ``clock``, ``retry_after_s`` and ``owner``."""
        super().__init__(profiles, store, is_attached, **kwargs)
        self.settings = settings
        self.runner = runner
        #: The submitting directory: a local job starts there; relative settings are made absolute against it.
        self.cwd = cwd or Path.cwd()

    def environment(self) -> dict[str, str]:
        """The ``FLUKSIO_*`` variables a provisioned worker gets (those with a password included)."""
        return worker_environment(self.settings, self.cwd)

    def script(self, profile: SlurmProfile, credentials: str | None = None) -> str:
        """The batch script a job of ``profile`` runs; ``credentials``: the path of its credentials file
        (needed when a setting carries a password)."""
        return batch_script(profile, self.environment(), credentials)

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
        secrets = secret_environment(self.environment())
        credentials = self._write_credentials(profile, request, credentials_text(secrets)) if secrets else None
        try:
            result = self._run(profile, ["sbatch", "--parsable"], self.script(profile, credentials),
                               SBATCH_TIMEOUT_S)
            if result.returncode != 0:
                raise ProvisionError(f"sbatch{self._where(profile)} refused the job: {_said(result)}")
            lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
            job_id = lines[-1].split(";")[0] if lines else ""  # --parsable: "id" or "id;cluster"
            if not job_id.isdigit():
                raise ProvisionError(f"sbatch{self._where(profile)} answered {result.stdout.strip()!r}, "
                                     "not a job id")
        except ProvisionError:
            if credentials is not None:
                self._remove_credentials(profile, request)
            raise
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

    def _settle(self, profile: SlurmProfile, request: MachineRequest) -> None:
        if secret_environment(self.environment()):
            self._remove_credentials(profile, request)

    # -- the credentials file -----------------------------------------------------------------------

    def credentials_path(self, profile: SlurmProfile, request: MachineRequest) -> str:
        """Where a request's credentials file lies on the submitting side: an absolute path here, a path
        relative to the home directory on the profile's login node."""
        if profile.host:
            return f"{CREDENTIALS_DIR}/{file_name(request.id)}"
        return str(self.cwd / CREDENTIALS_DIR / file_name(request.id))

    def _write_credentials(self, profile: SlurmProfile, request: MachineRequest, text: str) -> str:
        """Write the request's credentials file; its absolute path as the job will see it."""
        name = file_name(request.id)
        if not profile.host:
            folder = self.cwd / CREDENTIALS_DIR
            try:
                return str(write_private(folder, name, text))
            except OSError as exc:
                raise ProvisionError(f"cannot write the job's credentials file in {folder}: "
                                     f"{exc.strerror or exc}") from None
        result = self._run(profile, ["sh", "-c", REMOTE_WRITE, "sh", CREDENTIALS_DIR, name], text,
                           SBATCH_TIMEOUT_S)
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        folder_path = lines[-1] if lines else ""
        if result.returncode != 0 or not folder_path.startswith("/"):
            raise ProvisionError(f"cannot write the job's credentials file in ~/{CREDENTIALS_DIR} on {profile.host}: "
                                 f"{_said(result)}")
        return f"{folder_path}/{name}"

    def _remove_credentials(self, profile: SlurmProfile, request: MachineRequest) -> None:
        """Remove the request's credentials file if it is still there; never raises."""
        path = self.credentials_path(profile, request)
        try:
            if not profile.host:
                Path(path).unlink(missing_ok=True)
                return
            result = self._run(profile, ["rm", "-f", "--", path], None, SCANCEL_TIMEOUT_S)
            if result.returncode != 0:
                raise ProvisionError(_said(result))
        except (OSError, ProvisionError) as exc:
            log.warning("could not remove the credentials file %s%s of profile %s: %s", path,
                        self._where(profile), profile.name, exc)

    def _run(self, profile: SlurmProfile, argv: list[str], stdin: str | None, timeout_s: float) -> CommandResult:
        return self.runner(self.command(profile, argv), stdin, timeout_s)

    @staticmethod
    def _where(profile: SlurmProfile) -> str:
        return f" on {profile.host}" if profile.host else ""


def _said(result: CommandResult) -> str:
    text = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()
    return " / ".join(text[-3:]) + f" (exit {result.returncode})"
