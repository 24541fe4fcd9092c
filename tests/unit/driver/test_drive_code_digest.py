"""A run is claimed with the code it was submitted with, and a worker that holds other code, and runs only the
code it registered, refuses its calls.

Each "process" here is a registry that imported the flow file at some moment: the driver and the worker
share the store, the books and the inboxes (as hosts share Redis and the database), not what they imported.
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from pathlib import Path

import pytest

from fluksio.cache.keys import cache_key
from fluksio.cache.lookup import lookup
from fluksio.driver.drive import drive
from fluksio.execution.call import execute_call
from fluksio.flows.node_code import node_codes
from fluksio.flows.registry import FlowRegistry
from fluksio.flows.source import code_digest
from fluksio.messages import NodeCall
from fluksio.runs.submit import submit_run
from fluksio.runtime import Runtime
from fluksio.schemas import RunStatus
from fluksio.store.run_rows import get_run, node_rows

FLOW_FILE = """
from fluksio import Flow

edited = Flow("edited", inputs={"x": int}, outputs=["y"])

@edited.node(provides="y")
def step(x):
    return x + 1
"""


pytestmark = pytest.mark.usefixtures("forget_imported_flow_files")


@pytest.fixture
def runtime(make_runtime):
    return make_runtime(cpus=4)


@pytest.fixture
def flow_file(tmp_path) -> Path:
    path = tmp_path / "code" / "edited_flows.py"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(FLOW_FILE))
    return path


def start_process(flow_file: Path) -> FlowRegistry:
    """What a process started now loads: the file as it is on disk now."""
    for name in [n for n in sys.modules if n.startswith("fluksio_flowfile_")]:
        del sys.modules[name]
    registry = FlowRegistry()
    registry.load_sources([str(flow_file)])
    return registry


def edit(flow_file: Path) -> None:
    flow_file.write_text(flow_file.read_text().replace("x + 1", "x + 1000"))  # another size: the memo sees it


def run_once(runtime: Runtime, driver: FlowRegistry, worker: FlowRegistry,
             sent: list[NodeCall] | None = None) -> str:
    """Submit and drive one run with ``driver``'s flows; its calls execute on a worker with ``worker``'s, which
    runs only the code it registered (FLUKSIO_ACCEPT_CODE=registered)."""
    on_driver = dataclasses.replace(runtime, registry=driver)
    registered_only = runtime.settings.model_copy(update={"accept_code": "registered"})
    on_worker = dataclasses.replace(runtime, registry=worker, settings=registered_only)

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        if sent is not None:
            sent.append(call)
        execute_call(on_worker, call.to_wire())

    run, _ = submit_run(runtime.db, driver, runtime.artifacts, "edited", engine="embedded", params={"x": 1},
                        embedded_machines=runtime.placer.machines())
    drive(on_driver, run.id, dispatch, lambda _call_id: None)
    return run.id


def test_a_driver_claims_with_the_code_it_loaded_not_the_file_on_disk(runtime, flow_file):
    process = start_process(flow_file)
    loaded = process.digest("edited")
    edit(flow_file)  # edited, nothing restarted
    flow = process.get("edited")
    assert code_digest(flow) != loaded
    sent: list[NodeCall] = []
    run_id = run_once(runtime, process, process, sent)
    record = get_run(runtime.db, run_id)
    assert record.status == RunStatus.OK.value and record.result == {"y": 2}
    assert record.code_digest == loaded
    assert [call.code_digest for call in sent] == [loaded]


def test_the_old_codes_outputs_are_never_served_to_the_new_code_from_the_cache(runtime, flow_file):
    old = start_process(flow_file)
    edit(flow_file)
    first = get_run(runtime.db, run_once(runtime, old, old))  # the not-restarted process: the old code
    assert first.status == RunStatus.OK.value and first.result == {"y": 2}
    new = start_process(flow_file)  # restarted: the edited code
    second = get_run(runtime.db, run_once(runtime, new, new))
    assert second.status == RunStatus.OK.value and second.result == {"y": 1001}
    assert [row.status for row in node_rows(runtime.db, second.id)] == ["ok"]  # ran, not restored
    third = get_run(runtime.db, run_once(runtime, new, new))
    assert [(row.status, row.cached_from) for row in node_rows(runtime.db, third.id)] == [("cached", second.id)]
    assert third.result == {"y": 1001}


@pytest.mark.parametrize("restarted", ["driver", "worker"])
def test_a_worker_that_loaded_other_code_than_the_driver_refuses_the_call(runtime, flow_file, restarted):
    before = start_process(flow_file)
    edit(flow_file)
    after = start_process(flow_file)
    driver, worker = (after, before) if restarted == "driver" else (before, after)
    run_id = run_once(runtime, driver, worker)
    record = get_run(runtime.db, run_id)
    assert record.status == RunStatus.ERROR.value
    assert record.code_digest == driver.digest("edited")
    [row] = node_rows(runtime.db, run_id)
    assert row.status == "error" and row.outputs is None
    if restarted == "driver":  # the submitter's files were as it loaded them: its code travelled with the run
        assert row.error.startswith(f"machine {runtime.machine} runs only the flows FLUKSIO_FLOWS loads "
                                    f"(FLUKSIO_ACCEPT_CODE=registered), and flow 'edited' of run {run_id} came with "
                                    f"code package {driver.digest('edited')[:19]}…, which it does not hold")
    else:  # edited after the submitter loaded them: not shipped, so only a worker holding that code may run it
        assert row.error.startswith(f"machine {runtime.machine} loaded other code for flow 'edited' than this run "
                                    f"was claimed with ({worker.digest('edited')[:19]}… here, "
                                    f"{driver.digest('edited')[:19]}… in the run's driver)")
        assert f"restart `fluksio worker` on {runtime.machine} (or the drivers)" in row.error
    assert runtime.placer.snapshot()["machines"][0]["free"]["cpus"] == 4  # the grant was given back
    spec = driver.get("edited").nodes["step"]
    key = cache_key("edited", spec, node_codes(driver.get("edited"))["step"], {"x": 1})
    assert lookup(runtime.db, runtime.artifacts, key) is None  # nothing recorded under the run's code
    # Restarting the stale side, as the message says, makes both load the same code: the run goes through.
    fixed = get_run(runtime.db, run_once(runtime, driver, driver))
    assert fixed.status == RunStatus.OK.value
    assert fixed.result == {"y": 1001 if restarted == "driver" else 2}
