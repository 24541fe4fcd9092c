"""A throwaway PostgreSQL for benchmarks: ``initdb`` and ``pg_ctl`` on a free 127.0.0.1 port, as the tests'
``PostgresServer`` does (durability off: fsync, synchronous commits and full-page writes, as a benchmark of
fluksio's own costs wants), removed again when stopped."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from benchmarks.harness import free_port


class PostgresServer:
    def __init__(self) -> None:
        self.port = free_port()
        # Not under the benchmark's temporary folder: the server runs as the postgres user when we are root.
        self.workdir = Path(tempfile.mkdtemp(prefix="fluksio-bench-pg-"))
        self.data = self.workdir / "data"
        self.bin: Path | None = None

    def _as_owner(self, *command: str) -> list[str]:
        # initdb refuses to run as root: run the server as the postgres user then.
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else list(command)

    def start(self) -> PostgresServer:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if not found:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.bin = found[-1].parent
        if os.geteuid() == 0:
            shutil.chown(self.workdir, "postgres", "postgres")
        subprocess.run(self._as_owner(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                                      "-E", "UTF8", "--no-sync"), check=True, capture_output=True, timeout=120)
        options = (f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
        subprocess.run(self._as_owner(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l",
                                      str(self.workdir / "server.log"), "-w", "-t", "60", "-o", options, "start"),
                       check=True, capture_output=True, timeout=90)
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.bin is not None and (self.data / "postmaster.pid").exists():
            subprocess.run(self._as_owner(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                                          "stop"), capture_output=True, timeout=60)
        shutil.rmtree(self.workdir, ignore_errors=True)
