"""A real Flower process: `fluksio flower` as a user starts it, and waiting until Celery workers hear it."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from tests.integration.support.cluster import Cluster
from tests.integration.support.servers import free_port


def get(url: str, auth: tuple[str, str] | None = None, timeout: float = 10) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class FlowerProcess:
    """`fluksio flower` as a user starts it, on a free 127.0.0.1 port."""

    def __init__(self, cluster: Cluster, *args: str, unauthenticated_api: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = cluster.workdir
        self.log = cluster.workdir / f"flower-{self.port}.log"
        env = dict(cluster.env)
        env.pop("FLOWER_UNAUTHENTICATED_API", None)
        if unauthenticated_api:
            env["FLOWER_UNAUTHENTICATED_API"] = "true"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "fluksio.cli.main", "flower", "--port", str(self.port), *args],
                cwd=cluster.workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def wait_ready(self, timeout: float = 60) -> FlowerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"fluksio flower exited {self.process.returncode}: {self.log_text()}")
            try:
                if get(f"{self.url}/healthcheck", timeout=1)[0] in (200, 401):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"Flower did not answer on {self.url}: {self.log_text()}")

    def api(self, path: str) -> Any:
        status, body = get(self.url + path)
        assert status == 200, (status, body[:300])
        return json.loads(body)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


def wait_consuming(cluster: Cluster, hostnames: set[str], timeout: float = 60) -> None:
    """Until every named Celery worker answers a ping: then it also hears Flower's call for task events.

    (A worker attaches to the placer's books before its Celery consumer starts; one that is not yet
    consuming misses the broadcast, and gets events only at Flower's next one, 5 s later.)
    """
    from fluksio.worker.flower import flower_app

    app = flower_app(cluster.settings())
    deadline = time.monotonic() + timeout
    while (answered := {name for reply in app.control.ping(timeout=0.5) for name in reply}) < hostnames:
        assert time.monotonic() < deadline, f"only {sorted(answered)} answer a ping"
