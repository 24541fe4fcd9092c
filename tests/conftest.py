"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import Client, Settings, connect
from tests.integration.support.servers import PostgresServer


@pytest.fixture(autouse=True)
def _clean_fluksio_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's FLUKSIO_* variables or a fluksio.toml in the working directory."""
    for key in list(os.environ):
        if key.startswith("FLUKSIO_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("FLUKSIO_CONFIG", str(tmp_path / "no-such-fluksio.toml"))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every test that uses the run store runs against SQLite and against a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fluksio.db'}"
    return request.getfixturevalue("postgres").new_database()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        artifacts_dir=tmp_path / "artifacts",
        cpus=2,
        machine_name="local",
        lease_interval_s=0.5,
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[Client]:
    with connect(settings) as embedded:
        yield embedded


class Compass:
    """Figures the reliability suite reports at the end of a run: faults survived, runs lost, rows duplicated,
    bad inputs tried."""

    def __init__(self) -> None:
        self.figures = {"faults survived": 0, "runs lost": 0, "rows duplicated": 0, "bad inputs tried": 0}

    def add(self, figure: str, count: int = 1) -> None:
        self.figures[figure] += count


_compass = Compass()


@pytest.fixture(scope="session")
def compass() -> Compass:
    return _compass


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A pytest-xdist worker hands its figures to the controller, which prints the sum."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fluksio_compass"] = dict(_compass.figures)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """On the pytest-xdist controller: add what a worker counted."""
    for figure, count in getattr(node, "workeroutput", {}).get("fluksio_compass", {}).items():
        _compass.add(figure, count)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if any(_compass.figures.values()):
        terminalreporter.section("fluksio compass")
        for figure, count in _compass.figures.items():
            terminalreporter.write_line(f"{figure}: {count}")


@pytest.fixture
def forget_imported_flow_files() -> Iterator[None]:
    """Flow files are imported as modules; drop the ones a test made so tests stay independent."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("fluksio_flowfile_", "flowpkg_")):
            del sys.modules[name]
