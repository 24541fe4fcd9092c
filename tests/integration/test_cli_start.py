"""`fluksio runs` on a shared broker (#37, "fast to start"): it checks the broker as every command does, with
redis-py alone, and reads the run store, importing neither Celery nor kombu. (The embedded default and
`--help`: tests/unit/cli/test_cli_start.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluksio import Settings
from fluksio.store.contact import open_run_store
from tests.integration.support.servers import RedisServer
from tests.unit.cli.test_cli_start import loaded_after

pytestmark = pytest.mark.integration


def test_runs_on_a_shared_broker_checks_it_without_celery_or_kombu(tmp_path: Path, redis_server: RedisServer) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    open_run_store(Settings(database_url=url)).dispose()  # a store at the newest schema: no Alembic to run
    installation = {"FLUKSIO_DATABASE_URL": url, "FLUKSIO_ARTIFACTS_DIR": str(tmp_path / "artifacts")}
    loaded, out = loaded_after([["runs", "--json"]], tmp_path, FLUKSIO_BROKER_URL=redis_server.url, **installation)
    assert json.loads(out) == []
    assert loaded == {"sqlalchemy", "redis"}  # the store it read, the broker it checked: nothing of Celery's
