"""What a worker offers: its flags checked, and the host's cpus, RAM and GPUs detected."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess

from fluksio.errors import ConfigError
from fluksio.runtime import host_ram_mb
from fluksio.schemas import Inventory

#: Machine names become queue names (``gpu@box1``) and Celery host names.
MACHINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def detect_gpus() -> tuple[int, ...]:
    """GPU indices from ``nvidia-smi`` when it exists and answers, else none."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return ()
    try:
        out = subprocess.run([binary, "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(int(line) for line in out.split() if line.strip().isdigit())


def parse_gpus(text: str | None) -> tuple[int, ...]:
    if text is None:
        return detect_gpus()
    if text.strip().lower() in ("", "none"):
        return ()
    try:
        ids = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"--gpus takes GPU ids separated by commas (e.g. 0,1) or 'none', got {text!r}") from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise ConfigError(f"--gpus ids must be distinct and ≥ 0, got {text!r}")
    return ids


def build_inventory(name: str | None, labels: str | None, cpus: int | None, gpus: str | None,
                    ram_mb: int | None) -> Inventory:
    name = name or socket.gethostname()
    if not MACHINE_NAME.match(name):
        raise ConfigError(f"--name {name!r} is not usable as a machine name; use letters, digits, '.', '_', '-'")
    label_list = [part.strip() for part in (labels or "").split(",") if part.strip()]
    for label in label_list:
        if not LABEL.match(label):
            raise ConfigError(f"--labels: {label!r} is not a valid label; use a word such as 'gpu' or 'a100'")
    if "default" in label_list:
        raise ConfigError("--labels: 'default' is reserved for nodes that ask for no label")
    if cpus is not None and cpus < 1:
        raise ConfigError(f"--cpus must be at least 1, got {cpus}")
    if ram_mb is not None and ram_mb < 0:
        raise ConfigError(f"--ram-mb must be ≥ 0, got {ram_mb}")
    return Inventory(name=name, cpus=cpus or os.cpu_count() or 1, gpus=parse_gpus(gpus),
                     ram_mb=host_ram_mb() if ram_mb is None else ram_mb, labels=tuple(dict.fromkeys(label_list)))
