"""Worker profiles: a TOML file per machine role (``workers/gpu.toml``), so a unit file need not repeat flags."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fluksio.errors import ConfigError


class WorkerProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    labels: list[str] = Field(default_factory=list)
    cpus: int | None = Field(default=None, ge=1)
    #: GPU ids ("0,1", [0, 1]) or "none"; absent means detect with nvidia-smi.
    gpus: str | list[int] | None = None
    ram_mb: int | None = Field(default=None, ge=0)
    drivers: bool = False
    #: Which code runs here (``--accept-code``; FLUKSIO_ACCEPT_CODE): absent means the installation's setting.
    accept_code: Literal["registered", "signed", "any"] | None = None

    @property
    def gpus_text(self) -> str | None:
        if isinstance(self.gpus, list):
            return ",".join(map(str, self.gpus)) or "none"
        return self.gpus


def load_profile(path: str | Path) -> WorkerProfile:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read worker profile {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"worker profile {path} is not valid TOML: {exc}") from None
    try:
        return WorkerProfile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"worker profile {path}: {problems} (known keys: "
                          f"{', '.join(WorkerProfile.model_fields)})") from None
