"""Real servers for integration tests: started here, bound to 127.0.0.1 on a free port, stopped after.

Outside CI a missing server skips its tests; with CI=true it fails them, so a
green CI always means they ran.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(binary: str) -> str:
    found = shutil.which(binary) or next(
        (str(p) for p in Path("/usr/sbin").glob(binary) if p.exists()), None)
    if found is None:
        message = f"{binary} is not installed (apt-get install {binary})"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return found


def need_module(name: str, install: str) -> None:
    """Like :func:`need`, for a Python package: skipped outside CI, failed in CI."""
    if importlib.util.find_spec(name) is None:
        message = f"{name} is not installed ({install})"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


def wait_for(condition: Callable[[], Any], timeout: float = 30.0, what: str = "a condition") -> Any:
    """Poll ``condition`` until it returns something truthy (returned); fail naming ``what`` after ``timeout``
    seconds. How the integration tests wait: for a condition, with a deadline, never for a fixed time."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """Whether a process of that id exists (a zombie does too, until its parent reaps it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def proc_listeners() -> dict[int, set[str]] | None:
    """Port → local IPv4 addresses listening on it, read from /proc/net/tcp."""
    table = Path("/proc/net/tcp")
    if not table.exists():
        return None
    listening: dict[int, set[str]] = {}
    for line in table.read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A":  # LISTEN
            address, port = local.split(":")
            dotted = ".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0))
            listening.setdefault(int(port, 16), set()).add(dotted)
    return listening


class RedisServer:
    """A real redis-server; with ``password`` it requires AUTH, with ``tls`` it speaks only TLS.

    TLS: the server's certificate (for 127.0.0.1) is signed by a CA made here with openssl, and ``url``
    verifies it (``ssl_ca_certs`` names that CA, ``ssl_cert_reqs=required``). With ``client_certs`` the
    server also asks clients for a certificate that CA signed, and ``url`` carries one.
    """

    def __init__(self, workdir: Path, password: str | None = None, tls: bool = False,
                 client_certs: bool = False) -> None:
        self.port = free_port()
        self.password = password
        self.tls = tls
        self.client_certs = client_certs
        self.workdir = workdir
        self.tls_dir = workdir / "tls"
        auth = f":{password}@" if password else ""
        scheme = "rediss" if tls else "redis"
        query = f"?ssl_cert_reqs=required&ssl_ca_certs={self.tls_dir / 'ca.pem'}" if tls else ""
        if client_certs:
            query += f"&ssl_certfile={self.tls_dir / 'client.pem'}&ssl_keyfile={self.tls_dir / 'client.key'}"
        self.url = f"{scheme}://{auth}127.0.0.1:{self.port}/0{query}"
        self.process: subprocess.Popen[bytes] | None = None

    def _tls_arguments(self) -> list[str]:
        folder = self.tls_dir
        if not (folder / "server.pem").exists():
            folder.mkdir(parents=True, exist_ok=True)
            openssl = need("openssl")

            def run(*args: str) -> None:
                subprocess.run([openssl, *args], cwd=folder, check=True, capture_output=True, timeout=60)

            run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=fluksio-test-ca",
                "-keyout", "ca.key", "-out", "ca.pem")
            (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
            for name in ("server", "client"):
                run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                    "-out", f"{name}.csr")
                run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                    "-days", "2", "-extfile", "san.ext", "-out", f"{name}.pem")
        return ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(folder / "server.pem"),
                "--tls-key-file", str(folder / "server.key"), "--tls-ca-cert-file", str(folder / "ca.pem"),
                "--tls-auth-clients", "yes" if self.client_certs else "no"]

    def start(self) -> RedisServer:
        binary = need("redis-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        listen = self._tls_arguments() if self.tls else ["--port", str(self.port)]
        secret = ["--requirepass", self.password] if self.password else []
        self.process = subprocess.Popen(
            [binary, *listen, *secret, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir), "--logfile", str(self.workdir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return self
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port}; see {self.workdir / 'redis.log'}")

    def stop(self, keep_data: bool = False) -> None:
        """Stop the server. Its data is lost (it runs without persistence), unless ``keep_data``: then it saves
        a snapshot as it shuts down, which :meth:`start` loads again, as a Redis with persistence restarts."""
        if self.process is None:
            return
        snapshot = self.workdir / "dump.rdb"
        if keep_data:
            import redis

            redis.Redis.from_url(self.url, socket_timeout=10).shutdown(save=True)
        else:
            snapshot.unlink(missing_ok=True)  # an earlier restart's: starting from it would bring back old data
            self.process.terminate()
        self.process.wait(10)
        self.process = None


class PostgresServer:
    """A throwaway PostgreSQL cluster (initdb, pg_ctl) on a free 127.0.0.1 port; one database per test."""

    def __init__(self) -> None:
        self.port = free_port()
        # Not under pytest's temporary folder: that one is private to root, and the server runs as postgres.
        self.workdir = Path(tempfile.mkdtemp(prefix="fluksio-pg-"))
        self.data = self.workdir / "data"
        self.bin: Path | None = None
        self._counter = 0

    def _as_owner(self, *command: str) -> list[str]:
        # initdb refuses to run as root: run the server as the postgres user then.
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *command]
        return list(command)

    def start(self) -> PostgresServer:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if not found:
            message = "PostgreSQL server is not installed (apt-get install postgresql)"
            if in_ci():
                pytest.fail(message)
            pytest.skip(message)
        self.bin = found[-1].parent
        self.workdir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.workdir, "postgres", "postgres")
        if not self.data.exists():
            subprocess.run(self._as_owner(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                                          "-A", "trust", "-E", "UTF8", "--no-sync"),
                           check=True, capture_output=True, timeout=120)
        self.resume()
        return self

    def resume(self) -> None:
        """Start (again) on the same port and data."""
        assert self.bin is not None
        options = (f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
        subprocess.run(self._as_owner(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l",
                                      str(self.workdir / "server.log"), "-w", "-t", "60", "-o", options, "start"),
                       check=True, capture_output=True, timeout=90)

    def pause(self) -> None:
        """Stop the server (fast shutdown: connections are cut), keeping its data."""
        assert self.bin is not None
        subprocess.run(self._as_owner(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"),
                       check=True, capture_output=True, timeout=60)

    def stop(self) -> None:
        if self.bin is not None and (self.data / "postmaster.pid").exists():
            self.pause()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def new_database(self) -> str:
        import psycopg

        self._counter += 1
        name = f"t{os.getpid()}_{self._counter}"
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"


class MotoServer:
    """moto's standalone S3-compatible server (the one s3fs's own tests use) on a free 127.0.0.1 port.

    It keeps objects in its own process (spooled to temporary files past a few MB). With ``auth`` it checks
    every request's credentials against its (empty) IAM, so any key is refused: a server that says no.
    """

    #: The credentials its clients use (moto accepts any unless ``auth``).
    CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": "us-east-1"}

    def __init__(self, workdir: Path, auth: bool = False) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.auth = auth
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a process needs in its environment to use this server."""
        return {**self.CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def start(self) -> MotoServer:
        import importlib.util
        import sys
        import urllib.error
        import urllib.request

        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
            message = "moto's server is not installed (pip install -e '.[dev]', which brings 'moto[server]')"
            if in_ci():
                pytest.fail(message)
            pytest.skip(message)
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.CREDENTIALS}
        if self.auth:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        log = open(self.workdir / f"moto-{self.port}.log", "ab")  # noqa: SIM115 - kept open for the process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()
                return self
            except urllib.error.HTTPError:
                return self  # it answered
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto's server did not answer on port {self.port}; see {self.workdir}")

    def client(self) -> object:
        """A boto3 S3 client of this server, for what a test does behind fluksio's back."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)  # type: ignore[attr-defined]
        return name

    def use_in(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """This process (and the processes it starts) use this server, whatever AWS_* this machine has set."""
        for key in [key for key in os.environ if key.startswith("AWS_")]:
            monkeypatch.delenv(key)
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            self.process = None


@contextmanager
def running_moto(workdir: Path, bucket: str) -> Iterator[MotoServer]:
    """A moto server with ``bucket`` made, stopped afterwards (a module's fixture)."""
    server = MotoServer(workdir).start()
    try:
        server.create_bucket(bucket)
        yield server
    finally:
        server.stop()
