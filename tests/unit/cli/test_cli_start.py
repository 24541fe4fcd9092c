"""`fluksio --help` and `fluksio runs` start without what only other commands need (#37, "fast to start"): Celery,
kombu, SQLAlchemy, redis-py and Alembic are imported by the commands that use them, when they run.

Checked in a new interpreter by the libraries each command left loaded, never by a clock
(benchmarks/cli_start.py times the commands). `fluksio runs` also pauses the garbage collector while it starts,
and gives it back to a caller that runs it in-process.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fluksio import Flow, RunStatus, Settings, connect
from fluksio.cli.main import cli
from fluksio.outage import LOGGER

HEAVY = ("celery", "kombu", "sqlalchemy", "redis", "alembic")

#: Runs each argument list (JSON in argv[1]) through the console script's command in this one interpreter, as
#: ``fluksio ARGS`` would, then prints which of HEAVY are loaded as the last line of stderr.
PROBE = f"""
import json, sys
from fluksio.cli.main import main
for args in json.loads(sys.argv[1]):
    sys.argv = ["fluksio", *args]
    try:
        main()
    except SystemExit as done:
        if done.code not in (0, None):
            sys.exit(f"fluksio {{' '.join(args)}} exited {{done.code}}")
print("loaded:" + ",".join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)
"""


def loaded_after(commands: list[list[str]], cwd: Path, **env: str) -> tuple[set[str], str]:
    """The HEAVY libraries loaded once ``commands`` ran, one after the other, in a new interpreter; and their
    stdout."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    environment.update(FLUKSIO_CONFIG=str(cwd / "no-such-fluksio.toml"), COLUMNS="200", **env)
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(commands)], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("loaded:"), done.stderr
    return {m for m in last.removeprefix("loaded:").split(",") if m}, done.stdout


def every_command(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group `fluksio --help` leads to, as the words that name it."""
    found = []
    for name, command in group.commands.items():
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += every_command(command, (*prefix, name))
    return found


def test_help_and_version_load_none_of_them(tmp_path: Path) -> None:
    commands = [["--help"], ["--version"], *[[*words, "--help"] for words in every_command(cli)]]
    assert len(commands) > 20  # every command's own --help is in it, groups' subcommands too
    loaded, out = loaded_after(commands, tmp_path)
    assert loaded == set()
    assert "Commands:" in out and "version" in out and "List runs, newest first." in out


def test_runs_reads_the_store_alone_without_celery_kombu_or_redis(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    flow = Flow("started", inputs={"n": int}, outputs=["twice"])

    @flow.node(provides="twice")
    def double(n: int) -> int:
        return 2 * n

    with connect(Settings(database_url=url, artifacts_dir=tmp_path / "artifacts", cpus=2)) as client:
        record = client.submit(flow, {"n": 21}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason

    loaded, out = loaded_after([["runs", "--json"]], tmp_path, FLUKSIO_DATABASE_URL=url,
                               FLUKSIO_ARTIFACTS_DIR=str(tmp_path / "artifacts"))
    assert loaded == {"sqlalchemy"}  # the store it read, and nothing that submits or drives runs
    listed = json.loads(out)
    assert [(r["id"], r["flow"], r["status"]) for r in listed] == [(record.id, "started", "ok")]

    loaded, out = loaded_after([["runs", "--flow", "started"]], tmp_path, FLUKSIO_DATABASE_URL=url)
    assert loaded == {"sqlalchemy"}
    assert record.id in out and "started" in out


def test_runs_in_process_leaves_the_collector_as_it_found_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fluksio runs` pauses garbage collection while it starts; a caller that runs it in-process gets it back,
    also when the command fails."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLUKSIO_DATABASE_URL", f"sqlite:///{tmp_path / 'runs.db'}")
    outage = logging.getLogger(LOGGER)  # commands show outage notices on the terminal: not after this test
    monkeypatch.setattr(outage, "handlers", list(outage.handlers))
    monkeypatch.setattr(outage, "level", outage.level)
    listed = CliRunner().invoke(cli, ["runs", "--json"])
    assert listed.exit_code == 0 and json.loads(listed.output) == [], listed.output
    assert gc.isenabled()
    refused = CliRunner().invoke(cli, ["runs", "--parent", "no-such-run"])
    assert refused.exit_code == 2 and "no-such-run" in refused.output, refused.output
    assert gc.isenabled()
