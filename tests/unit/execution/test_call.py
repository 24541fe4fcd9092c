"""A node call that reaches a worker always ends: its grant is given back and its driver hears of it."""

from __future__ import annotations

from pathlib import Path

from fluksio import Flow, Settings
from fluksio.execution.call import execute_call
from fluksio.placement.placer import Request
from fluksio.runtime import Runtime
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
    assert completion is not None and completion.status == "error"
    assert "flow 'elsewhere' is not registered on machine m" in completion.error
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
    assert completion.status == "error" and "contains a NUL character" in completion.error


def counting_flow(name: str, added: int, ran: list[int]) -> Flow:
    """A flow without a file (its digest is its function's code) whose node notes that it ran."""
    namespace: dict = {"Flow": Flow, "__name__": "notebook", "ran": ran}
    exec(f"flow = Flow({name!r}, inputs={{'x': int}})\n"
         f"@flow.node(provides='y')\ndef step(x):\n    ran.append(x)\n    return x + {added}\n", namespace)
    return namespace["flow"]


def call_of(runtime: Runtime, call_id: str, flow: str, **extra: object) -> dict:
    grant = runtime.placer.try_claim(Request(call_id, Resources(cpus=1)))
    return {"call_id": call_id, "run_id": "r", "flow": flow, "node": "step", "attempt": 1, "inputs": {"x": 1},
            "grant": grant.model_dump(mode="json"), **extra}


def test_a_call_claimed_with_other_code_than_loaded_here_is_refused_and_gives_its_grant_back(tmp_path: Path) -> None:
    runtime = runtime_with_one_machine(tmp_path)
    ran: list[int] = []
    runtime.registry.register(counting_flow("train", 1, ran))
    here = runtime.registry.digest("train")
    started: list[dict] = []
    runtime.events.subscribe(lambda event: started.append(event) if event.get("event") == "node_started" else None)
    driver_digest = "sha256:" + "cd34" * 16
    execute_call(runtime, call_of(runtime, "r.step.1", "train", code_digest=driver_digest))
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion is not None and completion.status == "error"
    assert completion.error == (
        f"machine m loaded other code for flow 'train' than this run was claimed with ({here[:19]}… here, "
        "sha256:cd34cd34cd34… in the run's driver): its files changed since one of them started; restart "
        "`fluksio worker` on m (or the drivers) so that both load the same code")
    assert ran == [] and started == []  # the node never ran
    assert completion.outputs is None
    assert runtime.placer.snapshot()["machines"][0]["free"]["cpus"] == 1
    assert runtime.placer.try_claim(Request("r.step.2", Resources(cpus=1))) is not None  # the cpu is free again


def test_a_call_claimed_with_the_code_loaded_here_runs(tmp_path: Path) -> None:
    runtime = runtime_with_one_machine(tmp_path)
    ran: list[int] = []
    runtime.registry.register(counting_flow("train", 1, ran))
    execute_call(runtime, call_of(runtime, "r.step.1", "train", code_digest=runtime.registry.digest("train")))
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion.status == "ok", completion.error
    assert completion.outputs == {"y": 2} and ran == [1]


def test_a_call_without_a_digest_from_an_older_driver_runs_as_before(tmp_path: Path) -> None:
    runtime = runtime_with_one_machine(tmp_path)
    ran: list[int] = []
    runtime.registry.register(counting_flow("train", 1, ran))
    execute_call(runtime, call_of(runtime, "r.step.1", "train"))
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion.status == "ok" and completion.outputs == {"y": 2} and ran == [1]


def test_a_call_runs_the_version_its_run_was_claimed_with_when_the_flow_was_redefined_since(
        tmp_path: Path) -> None:
    """One process (embedded, a notebook): a run claimed before the flow was redefined finishes on its code."""
    runtime = runtime_with_one_machine(tmp_path)
    old_ran: list[int] = []
    new_ran: list[int] = []
    old = runtime.registry.register(counting_flow("train", 1, old_ran))
    old_digest = runtime.registry.digest(old)
    runtime.registry.register(counting_flow("train", 100, new_ran))
    assert runtime.registry.digest("train") != old_digest
    execute_call(runtime, call_of(runtime, "r.step.1", "train", code_digest=old_digest))
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion.status == "ok" and completion.outputs == {"y": 2}
    assert old_ran == [1] and new_ran == []
    execute_call(runtime, call_of(runtime, "r.step.2", "train", code_digest=runtime.registry.digest("train")))
    assert runtime.inbox.pop("r", timeout=1).outputs == {"y": 101} and new_ran == [1]


def test_a_second_copy_of_a_running_call_is_dropped_without_touching_the_first(tmp_path: Path) -> None:
    # Even a copy this worker would refuse (here: a flow it does not know) must not give back the grant
    # of the copy that runs, nor tell the driver the call failed.
    runtime = runtime_with_one_machine(tmp_path)
    grant = runtime.placer.try_claim(Request("r.n.1", Resources(cpus=1)))
    assert runtime.placer.start(grant, "the copy that runs")
    execute_call(runtime, {"call_id": "r.n.1", "run_id": "r", "flow": "elsewhere", "node": "n", "attempt": 1,
                           "inputs": {}, "grant": grant.model_dump(mode="json")})
    assert runtime.inbox.pop("r", timeout=0.2) is None
    assert runtime.placer.snapshot()["machines"][0]["free"]["cpus"] == 0


def test_a_completion_names_the_drive_its_call_came_from(tmp_path: Path) -> None:
    """A driver that lost its run to a resume tells its successor's completions (epoch 1) from its own."""
    runtime = runtime_with_one_machine(tmp_path)
    runtime.registry.register(counting_flow("epochs", 1, []))
    execute_call(runtime, call_of(runtime, "r.r1.step.1", "epochs", epoch=1))
    completion = runtime.inbox.pop("r", timeout=1)
    assert (completion.status, completion.epoch, completion.outputs) == ("ok", 1, {"y": 2})


def test_a_store_that_fails_storing_an_output_fails_only_that_node(tmp_path: Path) -> None:
    from fluksio import Artifact
    from fluksio.artifacts import MemoryArtifactStore
    from fluksio.errors import ArtifactError

    class TimingOut(MemoryArtifactStore):
        def put(self, artifact: Artifact) -> Artifact:
            raise ArtifactError("artifact store s3://b/p: could not store artifact sha256:…: ReadTimeoutError")

    runtime = runtime_with_one_machine(tmp_path)
    runtime.artifacts = TimingOut()
    flow = Flow("blob")

    @flow.node(provides="blob")
    def step():
        print("made it")
        return Artifact.from_bytes(b"x")

    runtime.registry.register(flow)
    execute_call(runtime, call_of(runtime, "r.step.1", "blob"))
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion.status == "error"
    assert completion.error == ("node 'step' could not store its outputs: artifact store s3://b/p: could not "
                                   "store artifact sha256:…: ReadTimeoutError")
    assert "made it" in completion.logs
    assert runtime.placer.snapshot()["machines"][0]["free"]["cpus"] == 1


def test_a_call_whose_start_cannot_be_checked_goes_back_to_its_queue_holding_its_grant(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    import pytest
    from celery import Celery
    from celery.exceptions import Reject

    from fluksio.constants import CALL_TASK
    from fluksio.errors import BrokerUnavailable, CallNotStarted
    from fluksio.execution.task import register_call_task

    runtime = runtime_with_one_machine(tmp_path)
    ran: list[int] = []
    runtime.registry.register(counting_flow("train", 1, ran))
    call = call_of(runtime, "r.step.1", "train")

    def out(*_args):
        raise BrokerUnavailable("the broker at h:6379 did not answer for 30 s")

    monkeypatch.setattr(runtime.placer, "start", out)
    with pytest.raises(CallNotStarted, match="could not check that it may start: BrokerUnavailable"):
        execute_call(runtime, call)
    app = Celery("t", set_as_current=False)
    app.fluksio_runtime = runtime
    register_call_task(app)
    with pytest.raises(Reject) as rejected:
        app.tasks[CALL_TASK](call)
    assert rejected.value.requeue is True  # not acknowledged: delivered again once the broker is back
    assert ran == [] and runtime.inbox.pop("r", timeout=0.01) is None  # nothing ran, nobody was told
    assert runtime.placer.snapshot()["machines"][0]["free"]["cpus"] == 0  # the grant is still the call's


def test_a_bug_in_checking_a_call_s_start_ends_the_call_as_an_error_with_its_grant_given_back(
        tmp_path: Path, monkeypatch) -> None:
    """Not taken for an outage (a message requeued for a bug would come back forever), nor acknowledged with the
    grant held (its run would wait for the call forever)."""
    runtime = runtime_with_one_machine(tmp_path)
    ran: list[int] = []
    runtime.registry.register(counting_flow("train", 1, ran))
    call = call_of(runtime, "r.step.1", "train")

    def bug(*_args):
        raise KeyError("grants")

    monkeypatch.setattr(runtime.placer, "start", bug)
    execute_call(runtime, call)
    completion = runtime.inbox.pop("r", timeout=1)
    assert completion.status == "error" and ran == []
    assert completion.error == "fluksio could not check that the call may start: KeyError: 'grants'"
    assert runtime.placer.snapshot()["machines"][0]["free"]["cpus"] == 1
