"""`fluksio placer`: waiting calls in the order they will be granted, with priority, pool and age, and each
pool's use — read from a real embedded installation whose placer has calls waiting."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fluksio import Settings, connect
from fluksio.cli import main
from fluksio.cli import placer as placer_command
from fluksio.placement.placer import Request
from fluksio.schemas import Resources


def test_placer_lists_who_waits_in_grant_order_and_each_pools_use(tmp_path, monkeypatch):
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'runs.db'}", artifacts_dir=tmp_path / "artifacts",
                        cpus=1, machine_name="laptop", pools={"licenses": 1})
    client = connect(settings)
    placer = client._runtime.placer
    placer.try_claim(Request("run-a.hog.1", Resources(), run_id="run-a", node="hog", pool="licenses"))
    placer.try_claim(Request("run-b.solve.1", Resources(), run_id="run-b", node="solve", priority=0))
    placer.try_claim(Request("run-c.urgent.1", Resources(), run_id="run-c", node="urgent", priority=5,
                             pool="licenses"))
    monkeypatch.setattr(placer_command, "open_client", lambda: client)
    shown = CliRunner().invoke(main.cli, ["placer"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    first = next(i for i, line in enumerate(lines) if "urgent" in line)
    second = next(i for i, line in enumerate(lines) if "solve" in line)
    assert first < second  # priority 5 before priority 0
    assert "waiting for pool 'licenses' (1/1 in use)" in lines[first] and " 5 " in lines[first]
    [pool_line] = [line for line in lines if line.lstrip().startswith("licenses")]
    assert "1/1" in pool_line and "run-a.hog.1" in pool_line

    client = connect(settings)
    monkeypatch.setattr(placer_command, "open_client", lambda: client)
    as_json = json.loads(CliRunner().invoke(main.cli, ["placer", "--json"]).output)
    assert as_json["pools"] == [{"name": "licenses", "slots": 1, "in_use": 0, "calls": []}]  # a new embedded one
