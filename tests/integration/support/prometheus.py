"""Debian's real ``prometheus`` for the monitoring tests: on a free 127.0.0.1 port, its data in the test's folder,
scraping the targets it is given every second; asked through its HTTP query API.

Skipped outside CI when it is not installed, failed in CI (``servers.need``). Not the package's defaults: not
/etc/prometheus/prometheus.yml, not /var/lib/prometheus, not 0.0.0.0:9090.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.support.servers import free_port, need, wait_for


@dataclass(frozen=True)
class Job:
    """One scrape job: ``target`` is ``host:port``; ``basic_auth`` a (user, password)."""

    name: str
    target: str
    path: str = "/metrics"
    basic_auth: tuple[str, str] | None = None

    def config(self) -> str:
        auth = (f"    basic_auth:\n      username: {self.basic_auth[0]}\n      password: {self.basic_auth[1]}\n"
                if self.basic_auth else "")
        return (f"  - job_name: {self.name}\n    metrics_path: {self.path}\n{auth}"
                f"    static_configs:\n      - targets: ['{self.target}']\n")


class PrometheusServer:
    def __init__(self, workdir: Path, jobs: list[Job]) -> None:
        self.workdir = workdir
        self.jobs = jobs
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        binary = need("prometheus")
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                          "scrape_configs:\n" + "".join(job.config() for job in self.jobs))
        log = open(self.workdir / "prometheus.log", "ab")  # noqa: SIM115 - kept open for the process
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._ready, 60, f"prometheus ready on {self.url}")
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"prometheus exited {self.process.returncode}: {self.log_text()}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector ``expression`` gives now (``/api/v1/query``): each ``{"metric": …, "value": […]}``."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expression})}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def value(self, expression: str) -> float | None:
        """The one value ``expression`` gives now, ``None`` while it gives none (not scraped yet)."""
        found = self.query(expression)
        assert len(found) <= 1, found
        return float(found[0]["value"][1]) if found else None

    def wait_value(self, expression: str, wanted: float, timeout: float = 60) -> None:
        """Until ``expression`` gives ``wanted`` (after scrapes to come), or fail saying what it gave."""
        seen: list[float | None] = []

        def given() -> bool:
            seen.append(self.value(expression))
            return seen[-1] == wanted

        try:
            wait_for(given, timeout, f"{expression} == {wanted:g} in prometheus")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it gave {seen[-1]}; targets: {self.targets()}") from None

    def targets(self) -> list[tuple[str, str, str]]:
        """Each target's job, health and last error, as Prometheus says."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as answer:
            active = json.load(answer)["data"]["activeTargets"]
        return [(t["labels"]["job"], t["health"], t["lastError"]) for t in active]

    def log_text(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            self.process = None
