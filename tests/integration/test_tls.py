"""TLS to Redis with real processes: a redis-server that speaks only TLS (``--tls-port``) and asks clients for
a certificate, with a CA and certificates made here by openssl. Runs work over rediss:// for Celery, the
placer's books, the inboxes and the events alike; a client that does not trust the server's certificate
is refused as it connects, at once and in one line, not retried as a broker outage."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import ConfigError, RunStatus, connect
from tests.certs import self_signed
from tests.integration.support import cluster_flows as flows
from tests.integration.support.cluster import Cluster, running_cluster
from tests.integration.support.monitor import Monitored

pytestmark = pytest.mark.integration

PASSWORD = "tls-Pa55word"
#: How long a refused certificate may take to be said (the outage tolerance is 60 s).
FAST_S = 10.0


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workers = {"tls-1": ("--cpus", "2", "--gpus", "none", "--drivers")}
    with running_cluster(tmp_path_factory.mktemp("tls"), workers, password=PASSWORD, tls=True,
                         client_certs=True) as setup:
        yield setup


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return self_signed(tmp_path_factory.mktemp("other-ca"), "not-the-servers-ca").certificate


def test_a_run_works_over_rediss_with_verified_server_and_client_certificates(tls_cluster: Cluster) -> None:
    url = tls_cluster.redis.url
    assert url.startswith("rediss://") and "ssl_cert_reqs=required" in url and "ssl_certfile=" in url
    with tls_cluster.client() as client, Monitored(url) as seen:
        record = client.submit(flows.marked, {"tag": "over-tls"}).wait(timeout=60)
        placement = client.placement()
    assert record.status is RunStatus.OK and record.nodes[0].machine == "tls-1"
    assert [m["name"] for m in placement["machines"]] == ["tls-1"]  # the books, over TLS
    commands = seen.text()
    assert b"fluksio:inbox:" in commands and b'"PUBLISH" "fluksio:events"' in commands  # inbox and events too
    assert PASSWORD not in tls_cluster.log_of("tls-1")


def test_a_client_without_a_certificate_is_refused_by_the_server_at_once(tls_cluster: Cluster) -> None:
    url = tls_cluster.redis.url.split("&ssl_certfile=")[0]  # trusts the server, but shows no certificate
    started = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        connect(tls_cluster.settings().model_copy(update={"broker_url": url}))
    assert time.monotonic() - started < FAST_S
    message = str(refused.value)
    assert "FLUKSIO_BROKER_URL=rediss://:***@127.0.0.1" in message and PASSWORD not in message
    assert "TLS failed" in message and "ssl_certfile" in message


def test_a_client_with_the_wrong_ca_is_refused_at_connect_in_one_line(tls_cluster: Cluster, other_ca: Path) -> None:
    url = tls_cluster.redis.url.replace(str(tls_cluster.redis.tls_dir / "ca.pem"), str(other_ca))
    started = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        connect(tls_cluster.settings().model_copy(update={"broker_url": url}))
    assert time.monotonic() - started < FAST_S
    message = str(refused.value)
    assert "the server's certificate did not verify" in message and "ssl_ca_certs=FILE" in message
    assert PASSWORD not in message and "\n" not in message


@pytest.mark.parametrize("command", [["run", "marked", "-p", "tag=x"], ["runs"],
                                     ["worker", "--name", "wrong-ca", "--cpus", "1", "--gpus", "none"]])
def test_commands_with_the_wrong_ca_exit_at_once_with_one_line(tls_cluster: Cluster, other_ca: Path,
                                                               command: list[str]) -> None:
    url = tls_cluster.redis.url.replace(str(tls_cluster.redis.tls_dir / "ca.pem"), str(other_ca))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "fluksio.cli.main", *command],
                          env={**tls_cluster.env, "FLUKSIO_BROKER_URL": url, "COLUMNS": "4000"},  # no wrapping
                          capture_output=True, text=True,
                          timeout=60)
    assert time.monotonic() - started < FAST_S + 5  # the interpreter's start and imports, besides
    assert done.returncode != 0 and "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "certificate did not verify" in lines[0] and PASSWORD not in done.stderr
