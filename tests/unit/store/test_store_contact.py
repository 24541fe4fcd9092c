"""Opening the run store: one line when it cannot be, and notices while a store function waits out an outage."""

from __future__ import annotations

import logging
import types
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from fluksio.errors import ConfigError, StoreUnavailable
from fluksio.outage import LOGGER
from fluksio.settings import Settings
from fluksio.store import db as db_module
from fluksio.store.contact import open_run_store
from fluksio.store.db import CONNECT_TIMEOUT_S, Database, retried


def test_a_missing_driver_is_a_config_error_naming_the_package() -> None:
    with pytest.raises(ConfigError) as info:
        open_run_store(Settings(database_url="mysql://fluksio:hunter2@db/runs"))
    message = str(info.value)
    assert "pip install mysqlclient" in message and "mysql://fluksio:***@db/runs" in message
    assert "hunter2" not in message


def test_an_unknown_scheme_is_a_config_error_naming_the_supported_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown scheme 'nosuchdb'.*SQLite .*PostgreSQL"):
        open_run_store(Settings(database_url="nosuchdb://x/y"))


def test_a_sqlite_file_under_a_file_cannot_be_opened_and_says_where(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("not a folder")
    with pytest.raises(StoreUnavailable, match=r"cannot open the run store sqlite:///.*plain/runs.db"):
        open_run_store(Settings(database_url=f"sqlite:///{tmp_path / 'plain' / 'runs.db'}"))


def test_postgres_connections_time_out_unless_the_url_says_otherwise() -> None:
    assert Database("postgresql+psycopg://u@127.0.0.1:1/x")._connect_args() == {"connect_timeout": CONNECT_TIMEOUT_S}
    assert Database("postgresql+psycopg://u@127.0.0.1:1/x?connect_timeout=1")._connect_args() == {}


def test_a_store_function_waiting_out_an_outage_says_so_and_says_when_it_is_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    monkeypatch.setattr(db_module, "time", types.SimpleNamespace(
        monotonic=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)))
    caplog.set_level(logging.INFO, logger=LOGGER)
    database = Database(f"sqlite:///{tmp_path / 'runs.db'}", outage_s=30)
    answers = iter([OperationalError("SELECT 1", {}, Exception("Connection refused"))] * 2 + [None])

    @retried
    def read(_db: Database) -> str:
        answer = next(answers)
        if answer is not None:
            raise answer
        return "row"

    assert read(database) == "row"
    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert said == [f"run store sqlite:///{tmp_path / 'runs.db'} unreachable (refused), retrying for 30 s more",
                    f"run store sqlite:///{tmp_path / 'runs.db'} reachable again"]
    database.dispose()
