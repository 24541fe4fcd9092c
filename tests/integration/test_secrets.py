"""Secrets as inputs with real processes: the submitter gives a name, the worker that runs the node has the
value, and the value is in no table, no log and no message the broker carried (MONITOR during the run)."""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import MetaData, create_engine, select

from fluksio import RunRejected, RunStatus
from tests.integration.support import security_flows as flows
from tests.integration.support.cluster import FLOWS_FILE, Cluster, running_cluster
from tests.integration.support.monitor import Monitored

pytestmark = pytest.mark.integration

#: The values: random, so that finding one anywhere can only mean it leaked there.
TOKEN = f"hf_{uuid.uuid4().hex}"
IN_FILE = f"file-{uuid.uuid4().hex}"
LOOSE = f"loose-{uuid.uuid4().hex}"
VALUES = (TOKEN, IN_FILE, LOOSE)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("secrets")
    secrets = folder / "secrets"
    secrets.mkdir(mode=0o700)
    (secrets / "IN_FILE").write_text(IN_FILE + "\n")
    (secrets / "IN_FILE").chmod(0o600)
    (secrets / "LOOSE").write_text(LOOSE)
    (secrets / "LOOSE").chmod(0o644)
    env = {"FLUKSIO_FLOWS": f"{FLOWS_FILE},{Path(flows.__file__)}"}
    with running_cluster(folder, {}, env=env) as setup:
        # Only the workers hold secrets: the test process (the submitter) has none of them.
        setup.start_worker("sec-1", "--cpus", "2", "--gpus", "none", "--drivers",
                           env={"FLUKSIO_SECRET_HF_TOKEN": TOKEN})
        setup.start_worker("bare-1", "--cpus", "1", "--gpus", "none", "--labels", "bare")
        setup.start_worker("dir-1", "--cpus", "1", "--gpus", "none", "--labels", "folder",
                           env={"FLUKSIO_SECRETS_DIR": str(secrets)})
        setup.wait_attached("sec-1", "bare-1", "dir-1")
        yield setup


def leaks_in_tables(cluster: Cluster) -> list[str]:
    """Where any secret value stands in the run store: every column of every row of every table."""
    engine = create_engine(cluster.env["FLUKSIO_DATABASE_URL"])
    tables = MetaData()
    tables.reflect(engine)
    found = []
    with engine.connect() as connection:
        for name, reflected in tables.tables.items():
            for row in connection.execute(select(reflected)):
                found += [f"{name}.{column}" for column, value in row._mapping.items()
                          if any(secret in str(value) for secret in VALUES)]
    engine.dispose()
    assert "run_nodes" in tables.tables and "runs" in tables.tables  # the scan saw the tables that matter
    return found


def test_the_node_gets_the_value_and_it_is_in_no_table_log_or_message(cluster: Cluster) -> None:
    with cluster.client() as client, Monitored(cluster.redis.url) as seen:
        record = client.submit(flows.with_token, {"token": "HF_TOKEN", "tag": "used"}).wait(timeout=60)
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"length": len(TOKEN), "digest": digest}  # the node had the value
    assert (cluster.marks / "used.digest").read_text() == digest
    assert record.params == {"token": "HF_TOKEN", "tag": "used"}  # what was journaled: the name
    logs = record.nodes[0].logs or ""
    assert "calling the API with ***" in logs and "token in use: *** (object: Secret('HF_TOKEN'))" in logs
    assert leaks_in_tables(cluster) == []
    worker_log = cluster.log_of("sec-1")
    assert TOKEN not in worker_log and "token in use: ***" in worker_log
    carried = seen.text()
    # Celery's messages carry their body base64-encoded: read those too, or a leak there would go unseen.
    bodies = b"\n".join(base64.b64decode(body) for body in re.findall(rb'body\\": \\"([A-Za-z0-9+/=]+)', carried))
    assert b'"token": "HF_TOKEN"' in bodies  # the call crossed the broker, naming the secret
    assert TOKEN.encode() not in carried and TOKEN.encode() not in bodies


def test_a_node_that_returns_the_value_fails_and_the_value_is_not_stored(cluster: Cluster) -> None:
    with cluster.client() as client:
        record = client.submit(flows.leaky, {"token": "HF_TOKEN"}).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    assert "put the value of a secret into its outputs" in (record.nodes[0].error or "")
    assert leaks_in_tables(cluster) == []


def test_a_worker_without_the_secret_fails_the_node_naming_the_secret_and_the_machine(cluster: Cluster) -> None:
    with cluster.client() as client:
        record = client.submit(flows.elsewhere, {"token": "HF_TOKEN"}).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    error = record.nodes[0].error or ""
    assert "'HF_TOKEN'" in error and "machine bare-1" in error and "FLUKSIO_SECRET_HF_TOKEN" in error


def test_a_secrets_folder_gives_owner_only_files_and_refuses_others(cluster: Cluster) -> None:
    with cluster.client() as client:
        good = client.submit(flows.from_folder, {"token": "IN_FILE"}).wait(timeout=60)
        loose = client.submit(flows.from_folder, {"token": "LOOSE"}).wait(timeout=60)
    assert good.status is RunStatus.OK and good.result == {"digest": hashlib.sha256(IN_FILE.encode()).hexdigest()}
    assert loose.status is RunStatus.ERROR
    error = loose.nodes[0].error or ""
    assert "may be read by others (mode 0644)" in error and "chmod 600" in error and "dir-1" in error
    assert leaks_in_tables(cluster) == [] and LOOSE not in cluster.log_of("dir-1")


def test_a_value_given_where_the_name_belongs_is_refused_without_being_repeated(cluster: Cluster) -> None:
    with cluster.client() as client, pytest.raises(RunRejected) as refused:
        client.submit(flows.with_token, {"token": TOKEN, "tag": "oops"})
    assert "give the secret's name" in str(refused.value) and TOKEN not in str(refused.value)
    assert leaks_in_tables(cluster) == []
