"""A node call that reaches a worker always ends: its grant is given back and its driver hears of it."""

from __future__ import annotations

from pathlib import Path

from fluksio import Flow, Settings
from fluksio.execution.call import execute_call
from fluksio.placement.placer import Request
from fluksio.runs.runtime import Runtime
from fluksio.schemas import Inventory, Resources


def runtime_with_one_machine(tmp_path: Path) -> Runtime:
    runtime = Runtime.standalone(Settings(database_url=f"sqlite:///{tmp_path / 'db'}",
                                          artifacts_dir=tmp_path / "artifacts"))
    runtime.db.upgrade()
    runtime.placer.attach(Inventory(name="m", cpus=1))
    return runtime


def test_a_call_naming_a_flow_not_registered_here_fails_and_gives_its_grant_back(tmp_path: Path) -> None:
    runtime = runtime_with_one_machine(tmp_path)
    grant = runtime.placer.try_claim(Request("r.n.1", Resources(cpus=1)))
    execute_call(runtime, {"call_id": "r.n.1", "run_id": "r", "flow": "elsewhere", "node": "n", "attempt": 1,
                           "inputs": {}, "grant": grant.model_dump(mode="json")})
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion is not None and completion["status"] == "error"
    assert "flow 'elsewhere' is not registered on machine m" in completion["error"]
    assert runtime.placer.snapshot()["machines"][0]["free"]["cpus"] == 1


def test_a_node_returning_a_nul_character_fails_with_a_message(tmp_path: Path) -> None:
    runtime = runtime_with_one_machine(tmp_path)
    flow = Flow("nul")

    @flow.node(provides="text")
    def text():
        return "a\x00b"

    runtime.registry.register(flow)
    grant = runtime.placer.try_claim(Request("r.text.1", Resources(cpus=1)))
    execute_call(runtime, {"call_id": "r.text.1", "run_id": "r", "flow": "nul", "node": "text", "attempt": 1,
                           "inputs": {}, "grant": grant.model_dump(mode="json")})
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion["status"] == "error" and "contains a NUL character" in completion["error"]
