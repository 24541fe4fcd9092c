"""A call whose code this worker does not hold but that came with a code package: refused or run per
FLUKSIO_ACCEPT_CODE, never in the worker's own process, its package checked out of the code cache first."""

from __future__ import annotations

from pathlib import Path

from fluksio import Flow, Settings
from fluksio.artifacts.artifact import Artifact
from fluksio.execution.call import execute_call
from fluksio.execution.ran import Ran
from fluksio.flows.package import pack
from fluksio.messages import NodeCall
from fluksio.placement.placer import Request
from fluksio.runtime import Runtime
from fluksio.schemas import Inventory, Resources


def runtime_with(tmp_path: Path, **settings: object) -> Runtime:
    runtime = Runtime.standalone(Settings(database_url=f"sqlite:///{tmp_path / 'db'}",
                                          artifacts_dir=tmp_path / "artifacts",
                                          artifacts_cache=tmp_path / "cache" / "artifacts", **settings))
    runtime.db.upgrade()
    runtime.placer.attach(Inventory(name="m", cpus=1))
    return runtime


def shipped_call(runtime: Runtime, digest: str, flow: str = "train") -> dict:
    grant = runtime.placer.try_claim(Request("r.fit.1", Resources(cpus=1)))
    return {"call_id": "r.fit.1", "run_id": "r", "flow": flow, "node": "fit", "attempt": 1, "inputs": {},
            "grant": grant.model_dump(mode="json"), "code_digest": digest, "code_entry": "flows.py"}


def package_of(tmp_path: Path) -> tuple[str, bytes]:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "flows.py").write_text("from fluksio import Flow\ntrain = Flow('train')\n")
    package = pack(str(tmp_path / "src" / "flows.py"))
    return package.digest, package.data


def test_a_worker_that_runs_only_registered_flows_refuses_a_shipped_package(tmp_path: Path) -> None:
    runtime = runtime_with(tmp_path)
    digest, _ = package_of(tmp_path)
    started: list[NodeCall] = []
    execute_call(runtime, shipped_call(runtime, digest), start_packaged=lambda call, *_: started.append(call))
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion is not None and completion.status == "error"
    assert completion.error.startswith("machine m runs only the flows FLUKSIO_FLOWS loads "
                                       "(FLUKSIO_ACCEPT_CODE=registered), and flow 'train' of run r came with code "
                                       "package sha256:")
    assert started == [] and runtime.placer.snapshot()["machines"][0]["free"]["cpus"] == 1


def test_an_accepted_package_is_checked_out_and_handed_to_a_process_that_imports_it(tmp_path: Path) -> None:
    runtime = runtime_with(tmp_path, accept_code="any")
    digest, data = package_of(tmp_path)
    runtime.artifacts.put(Artifact.from_bytes(data))
    handed: list[tuple[NodeCall, tuple[int, ...], Path]] = []

    def start_packaged(call: NodeCall, gpus: tuple[int, ...], folder: Path) -> Ran:
        handed.append((call, gpus, folder))
        return Ran({}, (), "ran elsewhere")

    execute_call(runtime, shipped_call(runtime, digest), start_packaged=start_packaged)
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion is not None and completion.status == "ok" and completion.logs == "ran elsewhere"
    [(call, gpus, folder)] = handed
    assert call.code_digest == digest and gpus == ()
    assert folder.is_relative_to(tmp_path / "cache" / "code") and (folder / "flows.py").is_file()


def never_started(call: NodeCall, gpus: tuple[int, ...], folder: Path) -> Ran:
    raise AssertionError(f"call {call.call_id} was handed to a package's process")


def test_a_registered_version_runs_here_as_before_even_when_the_call_ships_its_code(tmp_path: Path) -> None:
    runtime = runtime_with(tmp_path)
    flow = Flow("here")

    @flow.node(provides="y")
    def fit() -> int:
        return 7

    runtime.registry.register(flow)
    wire = shipped_call(runtime, runtime.registry.digest("here"), flow="here")
    execute_call(runtime, wire, start_packaged=never_started)
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion is not None and completion.status == "ok" and completion.outputs == {"y": 7}


def test_a_package_missing_from_the_store_fails_the_node_in_one_line(tmp_path: Path) -> None:
    runtime = runtime_with(tmp_path, accept_code="any")
    digest, _ = package_of(tmp_path)
    execute_call(runtime, shipped_call(runtime, digest), start_packaged=lambda *_: Ran({}, (), ""))
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion is not None and completion.status == "error"
    assert completion.error.startswith(f"code package {digest} is not in the artifact store this worker reads")
    assert "\n" not in completion.error
