"""Provisioner profiles: ``config/provisioners.json``, a JSON list of machines fluksio may ask a cluster for.

Each profile is one shape of machine (cpus, gpus, RAM, labels) and how to get
it (today: a Slurm batch job, submitted here or through ssh on a login node).
A bad file is refused as a whole, with every problem named by file, profile and
field, because a half-read profile list would ask clusters for the wrong machines.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fluksio.schemas import Resources
from fluksio.settings import parse_json_list, read_json_file

#: Where an installation's profiles are when ``FLUKSIO_PROVISIONERS`` names no file (relative to the working
#: directory); absent, nothing is provisioned.
DEFAULT_PATH = Path("config/provisioners.json")
#: A profile's name goes into machine names (``slurm-<profile>-<job id>``), Celery host and queue names,
#: and Slurm job names; so: letters, digits, ``_`` and ``-``, starting with a letter or digit.
PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$")
#: Labels are words, as ``fluksio worker --labels`` accepts them (see fluksio/worker/inventory.py).
LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
#: Slurm's time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
#: days-hours:minutes, days-hours:minutes:seconds; or no limit.
TIME_LIMIT = re.compile(r"^(\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)$")
#: An ssh destination (``login1``, ``me@login.cluster.org``, an ssh_config alias); never an option.
SSH_TARGET = re.compile(r"^[A-Za-z0-9_.@\[\]:%+-]+$")
#: A word that may stand in an ``#SBATCH`` line (partition, account).
SLURM_WORD = re.compile(r"^[A-Za-z0-9_.,:+-]+$")


class SlurmProfile(BaseModel):
    """One machine shape a Slurm cluster can start; its payload is a ``fluksio worker`` that dials back."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Literal["slurm"]
    #: ssh destination of the login node; empty: run ``sbatch`` on this host.
    host: str = ""
    partition: str | None = None
    account: str | None = None
    cpus: int = Field(default=1, ge=1)
    gpus: int = Field(default=0, ge=0)
    #: RAM asked of Slurm (``--mem``) and offered by the worker, in MB; 0 asks Slurm for nothing.
    ram_mb: int = Field(default=0, ge=0)
    #: Labels the started worker carries (besides its name, ``slurm-<profile>-<job id>``).
    labels: tuple[str, ...] = ()
    #: Slurm's ``--time`` (e.g. ``"2:00:00"``, ``"1-00:00:00"``); none: the partition's default.
    time_limit: str | None = None
    #: Shell lines run before the worker starts: module loads, activating a venv. fluksio never installs
    #: anything on a cluster; these lines must make ``fluksio`` runnable. They are part of the batch script,
    #: which Slurm keeps in its records: no passwords here (fluksio's own go in a credentials file).
    prerun: tuple[str, ...] = ()
    #: A job whose worker has not attached this long after submission is cancelled, in seconds.
    attach_timeout_s: float = Field(default=600.0, gt=0)
    #: The started worker exits after this long without a node call, ending its job, in seconds.
    idle_timeout_s: float = Field(default=300.0, gt=0)
    #: Further ``#SBATCH`` arguments, one per entry (``"--qos=short"``, ``"--constraint=a100"``).
    sbatch_args: tuple[str, ...] = ()
    #: The job's output file (``%j`` is the job id, ``%x`` the job name), relative to the job's working
    #: directory (the submitting directory here, the home directory through ssh) unless absolute.
    output: str = "%x-%j.out"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not PROFILE_NAME.match(value):
            raise ValueError(f"{value!r} is not usable in a worker name; use letters, digits, '_' and '-' "
                             "(at most 48, starting with a letter or digit)")
        return value

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        value = value.strip()
        if value and (value.startswith("-") or not SSH_TARGET.match(value)):
            raise ValueError(f"{value!r} is not an ssh destination (e.g. 'login1' or 'me@login.example.org'); "
                             "leave it empty to run sbatch on this host")
        return value

    @field_validator("partition", "account")
    @classmethod
    def _slurm_word(cls, value: str | None) -> str | None:
        if value is not None and not SLURM_WORD.match(value):
            raise ValueError(f"{value!r} is not a Slurm name (no spaces or quotes)")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for label in value:
            if not LABEL.match(label):
                raise ValueError(f"{label!r} is not a label; labels are words such as 'gpu' or 'a100'")
            if label == "default":
                raise ValueError("'default' is reserved for nodes that ask for no label")
        return tuple(dict.fromkeys(value))

    @field_validator("time_limit")
    @classmethod
    def _time_limit(cls, value: str | None) -> str | None:
        if value is not None and not TIME_LIMIT.match(value.strip()):
            raise ValueError(f"{value!r} is not a Slurm time; use minutes, 'H:MM:SS', 'D-HH' or 'D-HH:MM:SS'")
        return None if value is None else value.strip()

    @field_validator("prerun", "sbatch_args", "output")
    @classmethod
    def _one_line(cls, value: Any) -> Any:
        for line in (value,) if isinstance(value, str) else value:
            if "\n" in line or "\r" in line:
                raise ValueError(f"{line!r} spans several lines; give one entry per line")
        return value

    @field_validator("sbatch_args")
    @classmethod
    def _options(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            if not arg.startswith("-"):
                raise ValueError(f"{arg!r} is not an sbatch option; write each as '--name=value'")
        return value

    @field_validator("output")
    @classmethod
    def _output(cls, value: str) -> str:
        if not value.strip() or any(c.isspace() for c in value):
            raise ValueError(f"{value!r} is not a file name sbatch reads (no spaces)")
        return value

    @property
    def shape(self) -> Resources:
        """What one machine of this profile offers the placer."""
        return Resources(cpus=self.cpus, gpus=self.gpus, ram_mb=self.ram_mb)

    @property
    def job_name(self) -> str:
        return f"fluksio-{self.name}"

    def machine_name(self, job_id: str) -> str:
        """The name its worker attaches under: ``slurm-<profile>-<job id>``."""
        return f"slurm-{self.name}-{job_id}"


def load_profiles(path: str | Path) -> list[SlurmProfile]:
    """Every profile of the file at ``path``; a :class:`ConfigError` naming each problem if any is wrong."""
    path = Path(path)
    return parse_profiles(read_json_file(path, "provisioner profiles"), source=str(path))


def parse_profiles(data: Any, source: str = "provisioner profiles") -> list[SlurmProfile]:
    """Profiles from already-decoded JSON (``source`` names it in errors)."""
    return parse_json_list(data, source, SlurmProfile, item="profile",
                           holds="profiles (each an object with name, kind, …)", describe=_describe,
                           named_before=lambda index: f"profile {index}")


def _describe(err: Any) -> str:
    loc = [str(part) for part in err["loc"]]
    field = loc[0] if loc else "(profile)"
    if err["type"] == "extra_forbidden":
        known = list(SlurmProfile.model_fields)
        hint = difflib.get_close_matches(field, known, n=1)
        guess = f"did you mean {hint[0]!r}? " if hint else ""
        return f"{field}: unknown field; {guess}known fields: {', '.join(known)}"
    if err["type"] == "missing":
        return f"{field}: required"
    if err["type"] == "literal_error" and field == "kind":
        return f"kind: {err['input']!r} is not a provisioner kind; the only kind is 'slurm'"
    message = err["msg"].removeprefix("Value error, ")
    where = ".".join(loc) if loc else "(profile)"
    given = err.get("input")
    if err["type"] != "value_error" and (given is None or isinstance(given, (str, int, float, bool))):
        message += f" (got {json.dumps(given)})"
    return f"{where}: {message}"


def profiles_path(provisioners: Path | None, cwd: Path | None = None) -> Path | None:
    """The profile file an installation uses: ``provisioners`` (the setting) if given, else
    ``config/provisioners.json`` under ``cwd`` when that file exists, else none (no provisioning)."""
    if provisioners is not None:
        return provisioners
    default = (cwd or Path.cwd()) / DEFAULT_PATH
    return default if default.is_file() else None
