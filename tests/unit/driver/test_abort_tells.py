"""A run that ends off the usual path — its driver failed, or its flow cannot be loaded — is told about like
any other: the alerts hear of it, and so would a waiting parent."""

from __future__ import annotations

import pytest

from fluksio.driver.dispatching import Dispatcher
from fluksio.driver.drive import drive
from fluksio.runs.submit import submit_run
from fluksio.schemas import RunStatus
from fluksio.store.run_rows import get_run
from tests.unit.driver.drives import chain, drive_instantly


@pytest.fixture
def told(make_runtime, monkeypatch):
    runtime = make_runtime(cpus=2)
    ended: list[tuple[str, RunStatus]] = []
    monkeypatch.setattr(runtime, "run_ended", lambda run_id, status, orphan=False: ended.append((run_id, status)))
    return runtime, ended


def test_a_driver_that_fails_ends_its_run_and_tells(told, monkeypatch) -> None:
    runtime, ended = told

    def broken(self) -> None:
        raise RuntimeError("a bug in scheduling")

    monkeypatch.setattr(Dispatcher, "schedule", broken)
    run_id = drive_instantly(runtime, chain(2))
    run = get_run(runtime.db, run_id)
    assert run.status == "error" and "the driver failed: RuntimeError: a bug in scheduling" in run.status_reason
    assert ended == [(run_id, RunStatus.ERROR)]


def test_a_run_whose_flow_cannot_be_loaded_ends_and_tells(told) -> None:
    runtime, ended = told
    flow = chain(2)
    run, _ = submit_run(runtime.db, runtime.registry, runtime.artifacts, flow, engine="embedded", params={},
                        no_cache=True, embedded_machines=runtime.placer.machines())
    runtime.registry._flows.pop(flow.name)  # the driver's process cannot load it (an import error, say)
    runtime.registry._versions.pop(flow.name)
    # ... and runs only the code it registered, so the package the run shipped is no way out either.
    runtime.settings = runtime.settings.model_copy(update={"accept_code": "registered"})
    drive(runtime, run.id, lambda *_: None, lambda _call_id: None)
    assert get_run(runtime.db, run.id).status == "error"
    assert ended == [(run.id, RunStatus.ERROR)]
