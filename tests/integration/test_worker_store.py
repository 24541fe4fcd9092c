"""A `fluksio worker` on a shared broker and no FLUKSIO_DATABASE_URL would journal into a SQLite file of its own,
which no other process reads: it is refused at start in one line, unless `--private-store` says it is meant."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import RunStatus, Settings, connect
from tests.integration.support.cluster import FLOWS_FILE, Cluster
from tests.integration.support.servers import RedisServer, free_port

pytestmark = pytest.mark.integration

FLUKSIO = [sys.executable, "-m", "fluksio.cli.main"]
WORKER = ["worker", "--name", "solo", "--cpus", "1", "--gpus", "none"]


def without_store(broker_url: str, config: Path) -> dict[str, str]:
    """A worker's environment that names a broker and no run store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    return {**env, "FLUKSIO_BROKER_URL": broker_url, "FLUKSIO_CONFIG": str(config), "COLUMNS": "4000"}


def test_a_worker_without_a_run_store_is_refused_at_start_in_one_line(tmp_path: Path) -> None:
    # No broker listens there: the run store is asked for before the broker is reached.
    env = without_store(f"redis://127.0.0.1:{free_port()}/0", tmp_path / "none.toml")
    done = subprocess.run([*FLUKSIO, *WORKER], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: fluksio worker needs the installation's run store, and FLUKSIO_DATABASE_URL "
                               "is not set: set it")
    assert "--private-store journals into sqlite:///.fluksio/fluksio.db here, which no other process reads" in lines[0]
    assert not (tmp_path / ".fluksio").exists()  # nothing was journaled anywhere


@pytest.fixture
def private(tmp_path: Path, redis_server: RedisServer) -> Iterator[Cluster]:
    """A worker with drivers, started with --private-store in a folder of its own, on a real Redis."""
    cluster = Cluster(tmp_path, redis_server)
    del cluster.env["FLUKSIO_DATABASE_URL"]
    (tmp_path / "solo").mkdir()
    try:
        cluster.start_worker("solo", "--cpus", "1", "--gpus", "none", "--drivers", "--private-store",
                             cwd=tmp_path / "solo")
        cluster.wait_attached("solo")
        yield cluster
    finally:
        cluster.stop_all()


def test_a_worker_with_private_store_runs_and_journals_into_its_own_file(private: Cluster, tmp_path: Path) -> None:
    store = tmp_path / "solo" / ".fluksio" / "fluksio.db"
    settings = Settings(broker_url=private.env["FLUKSIO_BROKER_URL"], database_url=f"sqlite:///{store}",
                        artifacts_dir=private.env["FLUKSIO_ARTIFACTS_DIR"], flows=[str(FLOWS_FILE)])
    with connect(settings) as client:  # reading the worker's own file: its drivers (started with it) drive the run
        record = client.submit("marked", {"tag": "private"}).wait(timeout=60)
    assert record.status is RunStatus.OK, (record.status_reason, private.log_of("solo"))
    assert record.nodes[0].machine == "solo"
