"""The installation in a real Prometheus: Debian's ``prometheus`` scrapes ``fluksio metrics-server`` and the
explorer's ``/metrics`` (behind its password) of a live installation — redis-server and a real ``fluksio worker``
— and its HTTP query API gives back what the installation holds: the worker's cpus, and a run that ended ok with
the durations of its calls."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fluksio import RunStatus
from tests.integration.support import cluster_flows as flows
from tests.integration.support.cluster import Cluster, running_cluster
from tests.integration.support.explorer import UiProcess
from tests.integration.support.prometheus import Job, PrometheusServer
from tests.integration.support.servers import free_port, need_module, wait_for

pytestmark = pytest.mark.integration

AUTH = ("scraper", "s3cret")


class MetricsServer:
    """`fluksio metrics-server` as an operator starts it, on a free 127.0.0.1 port."""

    def __init__(self, cluster: Cluster, *args: str) -> None:
        self.port = free_port()
        self.log = cluster.workdir / f"metrics-server-{self.port}.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "fluksio.cli.main", "metrics-server", "--port", str(self.port), *args],
                env=cluster.env, cwd=cluster.workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self) -> MetricsServer:
        def answers() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"metrics-server exited {self.process.returncode}: {self.log_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as answer:
                    return bool(answer.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        wait_for(answers, 60, f"fluksio metrics-server answering on port {self.port}")
        return self

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"

    def stop(self) -> int:
        self.process.terminate()  # SIGTERM, as a service manager stops it
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            raise


@dataclass
class Setup:
    cluster: Cluster
    metrics: MetricsServer
    ui: UiProcess
    prometheus: PrometheusServer


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    need_module("prometheus_client", "pip install 'fluksio[metrics]'")
    need_module("tornado", "pip install 'fluksio[ui]'")
    workdir = tmp_path_factory.mktemp("prometheus")
    with running_cluster(workdir, {"box": ("--cpus", "3", "--gpus", "0,1", "--drivers")}) as cluster:
        metrics = MetricsServer(cluster)
        ui = UiProcess(workdir, {**cluster.env, "FLUKSIO_UI_BASIC_AUTH": ":".join(AUTH)})
        ui.auth = AUTH
        prometheus = None
        try:
            metrics.wait_ready()
            ui.wait_ready()
            prometheus = PrometheusServer(workdir / "prometheus", [
                Job("fluksio", f"127.0.0.1:{metrics.port}"),
                Job("explorer", f"127.0.0.1:{ui.port}", basic_auth=AUTH),
            ]).start()
            yield Setup(cluster, metrics, ui, prometheus)
        finally:
            if prometheus is not None:
                prometheus.stop()
            ui.stop()
            metrics.stop()


def test_prometheus_reads_the_worker_s_machine_from_both_endpoints(setup: Setup) -> None:
    for job in ("fluksio", "explorer"):
        setup.prometheus.wait_value(f'fluksio_machine_cpus_total{{job="{job}",machine="box"}}', 3)
        setup.prometheus.wait_value(f'fluksio_machine_gpus_total{{job="{job}",machine="box"}}', 2)
        setup.prometheus.wait_value(f'fluksio_up{{job="{job}"}}', 1)
    assert setup.prometheus.value('fluksio_calls_waiting{job="fluksio",label="default",reason="resources"}') == 0


def test_prometheus_reads_a_finished_run_and_its_calls_durations(setup: Setup) -> None:
    # Scraped at least once with the store read: each exporter's count of call durations starts from there.
    for job in ("fluksio", "explorer"):
        setup.prometheus.wait_value(f'fluksio_up{{job="{job}"}}', 1)
    with setup.cluster.client() as client:
        record = client.submit(flows.spread, {"width": 2, "pause": 0.2}).wait(timeout=90)
    assert record.status is RunStatus.OK, record.status_reason
    for job in ("fluksio", "explorer"):
        setup.prometheus.wait_value(f'fluksio_runs{{job="{job}",status="ok"}}', 1)
        setup.prometheus.wait_value(
            f'fluksio_call_duration_seconds_count{{job="{job}",flow="spread",node="work0"}}', 1)
    slow = setup.prometheus.value('fluksio_call_duration_seconds_bucket{job="fluksio",flow="spread",node="work0",'
                                  'le="0.1"}')
    assert slow == 0  # work0 slept 0.2 s: not in the bucket of calls up to 0.1 s


def test_it_stops_on_sigterm_and_refuses_a_port_in_use_in_one_line(setup: Setup, tmp_path: Path) -> None:
    taken = subprocess.run(
        [sys.executable, "-m", "fluksio.cli.main", "metrics-server", "--port", str(setup.metrics.port)],
        env=setup.cluster.env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert taken.returncode == 2, taken.stderr
    assert f"cannot listen on 127.0.0.1:{setup.metrics.port}" in taken.stderr and "Traceback" not in taken.stderr
    spare = MetricsServer(setup.cluster).wait_ready()
    assert spare.stop() == 0, spare.log_text()
