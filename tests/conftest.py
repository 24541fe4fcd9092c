"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import Client, Settings, connect


@pytest.fixture(autouse=True)
def _clean_fluksio_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's FLUKSIO_* variables or a fluksio.toml in the working directory."""
    for key in list(os.environ):
        if key.startswith("FLUKSIO_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("FLUKSIO_CONFIG", str(tmp_path / "no-such-fluksio.toml"))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path / 'fluksio.db'}",
        artifacts_dir=tmp_path / "artifacts",
        cpus=2,
        machine_name="local",
        lease_interval_s=0.5,
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[Client]:
    with connect(settings) as embedded:
        yield embedded
