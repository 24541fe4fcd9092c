"""The batch script of a Slurm profile: ``#SBATCH`` lines, this installation's settings, the prerun
lines, then ``exec fluksio worker`` under the name ``slurm-<profile>-$SLURM_JOB_ID``. Pure.

Slurm keeps job scripts in its records, so a setting that carries a password is never written into
one: the script sources it from a credentials file (:func:`credentials_text`; see credentials.py for
where that file lies and who removes it) and removes the file once read.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from fluksio.provisioners.config import SlurmProfile
from fluksio.settings import Settings, redact_url

#: Settings that describe one machine (the embedded one) or the driver's side, not the installation:
#: a provisioned worker gets its machine from the profile, and never provisions in turn.
#: Nor the passwords only drivers and front doors use (alerts' SMTP, the explorer's): a provisioned worker
#: runs node calls only, and a password it never needs is one fewer in a file on the cluster.
NOT_EXPORTED = frozenset({"machine_name", "labels", "cpus", "ram_mb", "provisioners", "smtp_password",
                          "ui_basic_auth"})
#: Paths a provisioned worker reads, made absolute against the submitting directory (as the artifacts
#: folder is): the signing key, its certificate and store, and the secrets folder (the path, never a value).
PATHS = frozenset({"signing_key", "signing_certificate", "signing_cert_store", "secrets_dir"})
#: ``sqlite:///relative.db`` (three slashes and no fourth): a path relative to the working directory.
_RELATIVE_SQLITE = re.compile(r"^(sqlite(?:\+\w+)?:///)(?!/)(.+)$")


def worker_environment(settings: Settings, cwd: Path) -> dict[str, str]:
    """The ``FLUKSIO_*`` variables that give a provisioned worker this installation's settings.

    Relative paths (artifacts folder, ``file.py`` flow sources, an SQLite file) are made absolute
    against ``cwd``, the submitting directory, and always exported: a job's prerun may change directory,
    and through ssh a job starts in the home directory. (Hosts share these paths anyway: the artifact
    store and the flow sources must be reachable under the same name from every machine.) Other
    settings at their defaults stay unsaid, so a cluster's fluksio a version behind still starts (it
    would reject a setting it does not know) and keeps the defaults both versions share.
    """
    env: dict[str, str] = {}
    for name, field in type(settings).model_fields.items():
        value = getattr(settings, name)
        if name in NOT_EXPORTED or value is None:
            continue
        text, absolute = _render(name, value, cwd)
        if absolute or value != field.get_default(call_default_factory=True):
            env[f"FLUKSIO_{name.upper()}"] = text
    return env


def is_secret(value: str) -> bool:
    """Whether a setting's value carries a password (what :func:`~fluksio.settings.redact_url` would hide)."""
    return redact_url(value) != value


def secret_environment(environment: dict[str, str]) -> dict[str, str]:
    """The variables of ``environment`` that carry a password: they go in the credentials file."""
    return {key: value for key, value in environment.items() if is_secret(value)}


def credentials_text(secrets: dict[str, str]) -> str:
    """The credentials file: shell ``export`` lines the batch script sources."""
    lines = ["# fluksio: settings that carry a password, for one Slurm job; removed once the job read them."]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(secrets.items())]
    return "\n".join(lines) + "\n"


def _render(name: str, value: Any, cwd: Path) -> tuple[str, bool]:
    """The setting as an environment value, and whether a relative path in it was made absolute."""
    if name == "artifacts_dir":
        if isinstance(value, str) and "://" in value:
            return value, False  # an object store's URL is the same from every host
        path = Path(str(value))
        return str(_absolute(path, cwd)), not path.is_absolute()
    if name in PATHS:
        return str(_absolute(Path(value), cwd)), not Path(value).is_absolute()
    if name == "flows":
        sources = [_absolute_source(source, cwd) for source in value]
        return ",".join(sources), sources != list(value)
    if name == "database_url":
        match = _RELATIVE_SQLITE.match(str(value))
        if match and match.group(2) != ":memory:":
            return f"{match.group(1)}{_absolute(Path(match.group(2)), cwd)}", True
        return str(value), False
    if isinstance(value, bool):
        return ("true" if value else "false"), False
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)), False
    return str(value), False


def worker_command(profile: SlurmProfile) -> str:
    """The line that becomes the job: a worker with the profile's inventory, exiting when idle."""
    parts = ["exec", "fluksio", "worker", "--name", f'"slurm-{profile.name}-${{SLURM_JOB_ID}}"']
    if profile.labels:
        parts += ["--labels", ",".join(profile.labels)]
    parts += ["--cpus", str(profile.cpus)]
    if profile.gpus:
        # Slurm names the job's GPUs (physical ids, or 0..n-1 under cgroup device confinement); either
        # way they are the ids a call's CUDA_VISIBLE_DEVICES must name.
        parts += ["--gpus", '"${CUDA_VISIBLE_DEVICES:?Slurm gave this job no GPUs; is gres/gpu configured?}"']
    else:
        parts += ["--gpus", "none"]
    parts += ["--ram-mb", str(profile.ram_mb), "--idle-timeout", f"{profile.idle_timeout_s:g}",
              "--loglevel", "info"]
    return " ".join(parts)


def sbatch_lines(profile: SlurmProfile) -> list[str]:
    lines = [f"--job-name={profile.job_name}", "--nodes=1", "--ntasks=1", f"--cpus-per-task={profile.cpus}"]
    if profile.ram_mb:
        lines.append(f"--mem={profile.ram_mb}M")
    if profile.gpus:
        lines.append(f"--gres=gpu:{profile.gpus}")
    if profile.time_limit:
        lines.append(f"--time={profile.time_limit}")
    if profile.partition:
        lines.append(f"--partition={profile.partition}")
    if profile.account:
        lines.append(f"--account={profile.account}")
    lines.append(f"--output={profile.output}")
    # A worker job is not restarted by Slurm (after a node failure or a preemption): its credentials file
    # is gone once read, and its calls were already given up; a waiting node asks for a fresh job instead.
    lines.append("--no-requeue")
    lines.extend(profile.sbatch_args)  # last: an explicit argument wins over fluksio's
    return [f"#SBATCH {line}" for line in lines]


def batch_script(profile: SlurmProfile, environment: dict[str, str], credentials: str | None = None) -> str:
    """The whole script ``sbatch`` reads on its standard input.

    ``environment``: the worker's ``FLUKSIO_*`` variables. Those that carry a password are left out of the
    script and read from ``credentials``, the absolute path of a file holding :func:`credentials_text`
    of them, as the compute node sees it; without one such variables are a :class:`ValueError`.
    """
    secrets = secret_environment(environment)
    if secrets and credentials is None:
        raise ValueError(f"{', '.join(sorted(secrets))} carr{'ies' if len(secrets) == 1 else 'y'} a password, "
                         "which must not be written into a batch script: pass the credentials file instead")
    lines = ["#!/bin/bash", *sbatch_lines(profile), "",
             f"# Written by fluksio for provisioner profile {profile.name!r}: a fluksio worker that dials",
             "# back to this installation, and exits (ending the job) when it has been idle for",
             f"# {profile.idle_timeout_s:g} s.",
             "set -e",
             "# This installation's settings; FLUKSIO_* variables of the submitting shell do not leak in.",
             'for _name in $(compgen -e); do case $_name in FLUKSIO_*) unset "$_name" ;; esac; done']
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(environment.items())
              if key not in secrets]
    if secrets:
        lines += _source_credentials(str(credentials), sorted(secrets))
    if profile.prerun:
        lines += ["# The profile's prerun lines (they may override the settings above on purpose).",
                  *profile.prerun]
    lines.append(worker_command(profile))
    return "\n".join(lines) + "\n"


def _source_credentials(path: str, names: list[str]) -> list[str]:
    quoted = shlex.quote(path)
    missing = (f"fluksio: cannot read {path}, which holds {', '.join(names)}: it is removed once a start of "
               "this job read it and when fluksio stops waiting for the job, and it must be on a filesystem "
               "this node mounts under the same path")
    return ["# Settings that carry a password are not in this script (Slurm keeps scripts in its records):",
            "# they are read from a file only the submitting user can read, removed once read.",
            f"if [ ! -r {quoted} ]; then echo {shlex.quote(missing)} >&2; exit 1; fi",
            f". {quoted}",
            f"rm -f {quoted}"]


def _absolute(path: Path, cwd: Path) -> Path:
    return path if path.is_absolute() else cwd / path


def _absolute_source(source: str, cwd: Path) -> str:
    target, colon, attr = source.partition(":")
    if target.endswith(".py") or "/" in target:  # a file, as fluksio.flows.registry reads it
        return f"{_absolute(Path(target), cwd)}{colon}{attr}"
    return source
