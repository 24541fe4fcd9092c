"""A fluksio installation on this one machine: a real Redis and real `fluksio worker` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from fluksio import Client, Settings, connect
from tests.integration.support.servers import RedisServer

FLOWS_FILE = Path(__file__).with_name("cluster_flows.py")
#: The timings of an installation that faults strike: a dead driver's runs stale in 3 s, outages waited out 30 s.
FAULT_TIMINGS = {"FLUKSIO_STALE_AFTER_S": "3", "FLUKSIO_LEASE_INTERVAL_S": "0.5", "FLUKSIO_BROKER_OUTAGE_S": "30",
                 "FLUKSIO_DB_OUTAGE_S": "30"}
#: Settings a test may give the installation through ``env`` that its clients here use too.
PASSED_SETTINGS = ("signing_key", "signing_certificate", "signing_cert_store", "secrets_dir", "stale_after_s")


class Cluster:
    def __init__(self, workdir: Path, redis_server: RedisServer, database_url: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.redis = redis_server
        self.marks = workdir / "marks"
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
        self.env.update({
            "FLUKSIO_BROKER_URL": redis_server.url,
            "FLUKSIO_DATABASE_URL": database_url or f"sqlite:///{workdir / 'fluksio.db'}",
            "FLUKSIO_ARTIFACTS_DIR": str(workdir / "artifacts"),
            "FLUKSIO_FLOWS": str(FLOWS_FILE),
            "FLUKSIO_HEARTBEAT_INTERVAL_S": "0.5",
            "FLUKSIO_HEARTBEAT_TTL_S": "2",
            "FLUKSIO_LEASE_INTERVAL_S": "1",
            "FLUKSIO_CONFIG": str(workdir / "none.toml"),
            "TEST_FLUKSIO_MARKS": str(self.marks),
        })
        self.env.update(env or {})  # what every process of the installation gets besides (signing, secrets …)

    def settings(self) -> Settings:
        """The installation's settings, for a client in this (the test's) process."""
        passed = {name: self.env[f"FLUKSIO_{name.upper()}"] for name in PASSED_SETTINGS
                  if f"FLUKSIO_{name.upper()}" in self.env}
        return Settings(
            broker_url=self.env["FLUKSIO_BROKER_URL"], database_url=self.env["FLUKSIO_DATABASE_URL"],
            artifacts_dir=self.env["FLUKSIO_ARTIFACTS_DIR"], flows=self.env["FLUKSIO_FLOWS"].split(","),
            heartbeat_interval_s=0.5, heartbeat_ttl_s=2, lease_interval_s=1, **passed,
        )

    def client(self) -> Client:
        return connect(self.settings())

    def marked(self, tag: str) -> list[str]:
        """The names of the marks the installation's nodes left under ``tag`` (``tag.*``), sorted."""
        return sorted(p.name for p in self.marks.glob(f"{tag}.*"))

    def start_worker(self, name: str, *args: str, cwd: Path | None = None,
                     env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A `fluksio worker` named ``name``, in working directory ``cwd`` (default: this process's), with ``env``
        over the installation's variables."""
        log = open(self.workdir / f"worker-{name}.log", "ab")  # noqa: SIM115 - kept open for the process
        process = subprocess.Popen(
            [sys.executable, "-m", "fluksio.cli.main", "worker", "--name", name, "--loglevel", "info", *args],
            env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
        )
        self.workers[name] = process
        return process

    def wait_attached(self, *names: str, timeout: float = 60) -> None:
        client = redis.Redis.from_url(self.redis.url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(client.exists(f"fluksio:heartbeat:{n}") for n in names):
                return
            for name in names:
                process = self.workers.get(name)
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"worker {name} exited: {self.log_of(name)}")
            time.sleep(0.1)
        raise TimeoutError(f"workers {names} did not attach: " + " | ".join(self.log_of(n) for n in names))

    def log_of(self, name: str) -> str:
        path = self.workdir / f"worker-{name}.log"
        return path.read_text()[-3000:] if path.exists() else "(no log)"

    def whole_log(self, name: str) -> str:
        """Everything worker ``name`` has logged so far (its log file, read as text)."""
        return (self.workdir / f"worker-{name}.log").read_text(errors="replace")

    def kill(self, name: str) -> None:
        """kill -9 of the worker and every process it started."""
        process = self.workers.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)

    def stop(self, name: str) -> None:
        """A warm shutdown (SIGTERM), as a service manager would do it."""
        process = self.workers.pop(name)
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)

    def stop_all(self) -> None:
        for name, process in list(self.workers.items()):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for name, process in list(self.workers.items()):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        self.workers.clear()


@contextmanager
def running_cluster(workdir: Path, workers: dict[str, tuple[str, ...]], database_url: str | None = None,
                    env: dict[str, str] | None = None, **redis_options: object) -> Iterator[Cluster]:
    """A redis-server and the named `fluksio worker`s (name → flags), all attached; stopped afterwards.

    ``env``: variables every worker (and :meth:`Cluster.settings`) gets besides the installation's own."""
    server = RedisServer(workdir / "redis", **redis_options).start()  # type: ignore[arg-type]
    setup = Cluster(workdir, server, database_url, env)
    try:
        for name, flags in workers.items():
            setup.start_worker(name, *flags)
        setup.wait_attached(*(name for name, flags in workers.items() if "--drivers-only" not in flags))
        yield setup
    finally:
        setup.stop_all()
        server.stop()


def wait_for_log(cluster: Cluster, name: str, text: str, timeout: float = 15) -> str:
    """The log of worker ``name`` once ``text`` appears in it; fails, showing the log, after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = cluster.log_of(name)
        if text in log:
            return log
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in the log of {name}: {cluster.log_of(name)[-1500:]}")
