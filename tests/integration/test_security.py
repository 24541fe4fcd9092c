"""Security with real processes: JSON only, only registered flows run, and broker credentials stay secret,
on a Redis that requires a password and on one that speaks only TLS (rediss://)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import RunStatus
from tests.integration.support import cluster_flows as flows
from tests.integration.support.cluster import Cluster, running_cluster, wait_for_log
from tests.integration.support.forgery import arm_call, celery_app, forged_call

pytestmark = pytest.mark.integration

SECRET = "s3cret-Pa55word"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workers = {"safe-1": ("--cpus", "2", "--gpus", "none", "--drivers")}
    with running_cluster(tmp_path_factory.mktemp("secured"), workers, password=SECRET) as setup:
        yield setup


def test_a_password_protected_redis_works_and_the_password_appears_nowhere(secured: Cluster) -> None:
    with secured.client() as client:
        record = client.submit(flows.marked, {"tag": "secret-run"}).wait(timeout=60)
        assert record.status is RunStatus.OK
        placement = json.dumps(client.placement())
        rows = record.model_dump_json()
    shown = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "placer"], env=secured.env,
                           capture_output=True, text=True, timeout=60)
    listed = subprocess.run([sys.executable, "-m", "fluksio.cli.main", "runs", "--json"], env=secured.env,
                            capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and listed.returncode == 0
    for text in (placement, rows, shown.stdout + shown.stderr, listed.stdout, secured.log_of("safe-1")):
        assert SECRET not in text
    assert "redis://:**@127.0.0.1" in secured.log_of("safe-1")  # Celery's banner, masked


def test_a_wrong_password_fails_without_echoing_it(secured: Cluster) -> None:
    from fluksio import connect

    wrong = secured.settings().model_copy(update={"broker_url": secured.redis.url.replace(SECRET, "not-it-42")})
    with pytest.raises(Exception) as failure, connect(wrong) as client:
        client.placement()
    assert "not-it-42" not in str(failure.value) and SECRET not in str(failure.value)


def test_a_pickled_message_on_a_fluksio_queue_is_refused_never_executed(secured: Cluster) -> None:
    call_id = "forged.pickle.1"
    grant = arm_call(secured, call_id)
    app = celery_app(secured, "pickle")
    app.send_task("fluksio.call", kwargs={"call": forged_call("marked", "leave_mark", call_id,
                                                              {"tag": "pickled"}, grant)},
                  queue="default@safe-1")
    log = wait_for_log(secured, "safe-1", "Refusing to deserialize untrusted content of type pickle")
    time.sleep(1.0)
    assert not list(secured.marks.glob("pickled.*"))
    assert "ContentDisallowed" in log or "Refusing" in log


def test_a_forged_call_naming_an_unregistered_module_is_refused_and_logged(secured: Cluster,
                                                                          tmp_path: Path) -> None:
    call_id = "forged.system.1"
    grant = arm_call(secured, call_id)
    target = tmp_path / "pwned"
    app = celery_app(secured, "json")
    app.send_task("fluksio.call", kwargs={"call": forged_call("os:system", "system", call_id,
                                                              {"command": f"touch {target}"}, grant)},
                  queue="default@safe-1")
    wait_for_log(secured, "safe-1", f"refusing call {call_id}: flow 'os:system' is not registered")
    time.sleep(0.5)
    assert not target.exists()


def test_rediss_urls_work_against_a_tls_only_redis(tmp_path: Path) -> None:
    workers = {"tls-1": ("--cpus", "1", "--gpus", "none", "--drivers")}
    with running_cluster(tmp_path, workers, password=SECRET, tls=True) as setup, setup.client() as client:
        record = client.submit(flows.marked, {"tag": "over-tls"}).wait(timeout=60)
        assert record.status is RunStatus.OK and record.nodes[0].machine == "tls-1"
        assert SECRET not in setup.log_of("tls-1")
