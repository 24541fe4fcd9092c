"""The provisioner's bookkeeping, on the in-memory fake: one outstanding request per profile, attach,
attach timeout (cancel, and say why), jobs that end, shutdown, and what `fluksio placer` shows."""

from __future__ import annotations

import threading
import time

import pytest

from fluksio.provisioners import (
    MemoryRequestStore,
    Poller,
    RequestState,
    create_provisioner,
)
from fluksio.provisioners.base import ProvisionError
from fluksio.provisioners.config import SlurmProfile
from fluksio.provisioners.fake import FakeProvisioner
from fluksio.provisioners.request import MachineRequest
from fluksio.schemas import Resources
from fluksio.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def p(name: str, **fields: object) -> SlurmProfile:
    return SlurmProfile.model_validate({"name": name, "kind": "slurm", "attach_timeout_s": 30, **fields})


PROFILES = [
    p("big", cpus=16, gpus=2, ram_mb=64_000, labels=["cluster", "gpu"]),
    p("small", cpus=2, ram_mb=4_000, labels=["cluster"]),
    p("mid", cpus=8, ram_mb=16_000, labels=["cluster", "highmem"]),
]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake(clock: Clock) -> FakeProvisioner:
    return FakeProvisioner(PROFILES, clock=clock, retry_after_s=120)


def test_shapes_are_what_the_placer_counts_when_clamping(fake: FakeProvisioner) -> None:
    assert fake.shapes() == [
        (Resources(cpus=16, gpus=2, ram_mb=64_000), ("cluster", "gpu")),
        (Resources(cpus=2, gpus=0, ram_mb=4_000), ("cluster",)),
        (Resources(cpus=8, gpus=0, ram_mb=16_000), ("cluster", "highmem")),
    ]


def test_covers_picks_the_smallest_profile_with_the_label_that_fits(fake: FakeProvisioner) -> None:
    assert fake.covers(Resources(cpus=1), "cluster").name == "small"
    assert fake.covers(Resources(cpus=4), "cluster").name == "mid"
    assert fake.covers(Resources(cpus=1, gpus=1), "cluster").name == "big"
    assert fake.covers(Resources(cpus=1), "gpu").name == "big"
    assert fake.covers(Resources(cpus=1), "highmem").name == "mid"
    assert fake.covers(Resources(cpus=1), None).name == "small"  # an unlabelled node can use any
    assert fake.covers(Resources(cpus=32), "cluster") is None  # larger than every profile
    assert fake.covers(Resources(cpus=1), "tpu") is None
    assert fake.carries("highmem") and not fake.carries("tpu")


def test_request_is_idempotent_per_profile(fake: FakeProvisioner) -> None:
    first = fake.request("small", "run r1 node a waits for a worker labelled 'cluster'")
    again = fake.request(fake.profiles["small"], "run r2 node b waits for a worker labelled 'cluster'")
    assert again == first and len(fake.jobs) == 1
    assert first.job_id == "100" and first.machine == "slurm-small-100" and first.state is RequestState.PENDING
    assert first.reason == "run r1 node a waits for a worker labelled 'cluster'"
    other = fake.request("mid", "why")
    assert other.job_id == "101" and len(fake.jobs) == 2


def test_racing_requests_submit_one_job(clock: Clock) -> None:
    store = MemoryRequestStore()
    drivers = [FakeProvisioner(PROFILES, store, clock=clock) for _ in range(8)]
    results: list[MachineRequest] = []
    barrier = threading.Barrier(len(drivers))

    def ask(driver: FakeProvisioner) -> None:
        barrier.wait()
        results.append(driver.request("small", "why"))

    threads = [threading.Thread(target=ask, args=(d,)) for d in drivers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sum(len(d.jobs) for d in drivers) == 1
    assert len({r.id for r in results}) == 1


def test_an_unknown_profile_is_an_error(fake: FakeProvisioner) -> None:
    with pytest.raises(ProvisionError, match="no provisioner profile named 'nope' \\(known: big, small, mid\\)"):
        fake.request("nope", "why")


def test_a_worker_that_attaches_ends_the_request_and_the_next_one_is_new(fake: FakeProvisioner,
                                                                         clock: Clock) -> None:
    first = fake.request("small", "why")
    clock.now += 5
    assert fake.poll() == []  # still pending
    fake.attach(first.job_id)
    [attached] = fake.poll()
    assert attached.state is RequestState.ATTACHED and attached.attached_at == clock.now
    assert attached.describe(clock.now) == "Slurm job 100 (profile 'small') is attached as slurm-small-100"
    # Attached is no longer outstanding: a node that still waits may ask for another machine.
    second = fake.request("small", "more work")
    assert second.job_id == "101"


def test_a_worker_that_does_not_attach_in_time_is_cancelled_and_says_why(fake: FakeProvisioner,
                                                                         clock: Clock) -> None:
    request = fake.request("big", "run r1 node fit waits for a worker labelled 'gpu'")
    fake.jobs[request.job_id].why = "JobHeldUser"
    clock.now += 29
    assert fake.poll() == []
    assert fake.current("big").describe(clock.now) == (
        "asked Slurm for a machine: job 100 (profile 'big') PENDING, JobHeldUser for 29s")
    clock.now += 1
    [cancelled] = fake.poll()
    assert fake.cancelled == ["100"] and fake.jobs["100"].state == "CANCELLED"
    assert cancelled.state is RequestState.CANCELLED
    assert cancelled.outcome == ("Slurm job 100 (profile 'big') was cancelled: its worker did not attach within "
                                 "30s (Slurm said: PENDING, JobHeldUser)")
    assert fake.current("big") == cancelled  # the waiting run's reason can say so
    assert cancelled.describe(clock.now) == cancelled.outcome
    # Not resubmitted in a loop: within retry_after_s the cancelled request is the answer.
    clock.now += 119
    assert fake.request("big", "again") == cancelled and len(fake.jobs) == 1
    clock.now += 1
    assert fake.request("big", "again").job_id == "101"


def test_a_job_that_ends_before_its_worker_attaches_fails(fake: FakeProvisioner, clock: Clock) -> None:
    request = fake.request("small", "why")
    fake.end(request.job_id, "FAILED")
    [failed] = fake.poll()
    assert failed.state is RequestState.FAILED
    assert failed.outcome == "Slurm job 100 (profile 'small') ended (FAILED) before its worker attached"
    assert fake.cancelled == []


def test_an_attached_job_that_ends_is_finished(fake: FakeProvisioner, clock: Clock) -> None:
    request = fake.request("small", "why")
    fake.attach(request.job_id)
    fake.poll()
    clock.now += 300
    fake.end(request.job_id)  # its worker was idle and exited
    [finished] = fake.poll()
    assert finished.state is RequestState.FINISHED
    assert finished.outcome == ("Slurm job 100 (profile 'small') ended (COMPLETED) after its worker "
                                "(slurm-small-100) attached")
    assert fake.store.live() == []


def test_a_job_slurm_has_forgotten_is_gone(fake: FakeProvisioner) -> None:
    request = fake.request("small", "why")
    fake.attach(request.job_id)
    fake.poll()
    fake.end(request.job_id)
    fake.purge(request.job_id)
    [finished] = fake.poll()
    assert finished.outcome == ("Slurm job 100 (profile 'small') is no longer known to Slurm after its worker "
                                "(slurm-small-100) attached")


def test_an_unreachable_scheduler_changes_nothing_but_the_attach_timeout_still_holds(
        fake: FakeProvisioner, clock: Clock) -> None:
    request = fake.request("small", "why")
    fake.poll()
    fake.unreachable = "squeue failed: Unable to contact slurm controller"
    clock.now += 10
    assert fake.poll() == [] and fake.current("small").state is RequestState.PENDING
    clock.now += 20
    [cancelled] = fake.poll()
    assert cancelled.state is RequestState.CANCELLED and fake.cancelled == [request.job_id]
    assert cancelled.outcome.endswith("(Slurm said: PENDING, Priority)")  # its last known state


def test_a_timeout_without_any_known_state_says_so(fake: FakeProvisioner, clock: Clock) -> None:
    fake.request("small", "why")
    fake.unreachable = "ssh: connect to host login1 port 22: Connection refused"
    clock.now += 30
    [cancelled] = fake.poll()
    assert cancelled.outcome.endswith("within 30s (its Slurm state could not be read)")


def test_a_refused_submission_fails_at_once_and_is_not_retried_at_once(fake: FakeProvisioner,
                                                                       clock: Clock) -> None:
    fake.refuse["big"] = "sbatch refused the job: Requested node configuration is not available (exit 1)"
    failed = fake.request("big", "why")
    assert failed.state is RequestState.FAILED and failed.job_id is None
    assert failed.outcome == ("could not submit a Slurm job for profile 'big': sbatch refused the job: "
                              "Requested node configuration is not available (exit 1)")
    del fake.refuse["big"]
    assert fake.request("big", "why") == failed
    clock.now += 120
    assert fake.request("big", "why").state is RequestState.PENDING


def test_a_submission_that_never_finished_is_given_up(fake: FakeProvisioner, clock: Clock) -> None:
    # A driver reserved the profile, then died before sbatch answered.
    stuck = MachineRequest(id="x", profile="small", reason="why", owner="dead:1", submitted_at=clock.now)
    assert fake.store.reserve(stuck) is None
    assert fake.request("small", "why") == stuck
    assert stuck.describe(clock.now) == "submitting a Slurm job for profile 'small'"
    clock.now += 31
    [failed] = fake.poll()
    assert failed.state is RequestState.FAILED and "never finished" in failed.outcome
    assert fake.request("small", "why").state is RequestState.FAILED  # retry window
    clock.now += 120
    assert fake.request("small", "why").job_id == "100"


def test_shutdown_cancels_only_this_processes_outstanding_requests(clock: Clock) -> None:
    store = MemoryRequestStore()
    mine = FakeProvisioner(PROFILES, store, clock=clock, owner="driver-a")
    theirs = FakeProvisioner(PROFILES, store, clock=clock, owner="driver-b")
    pending = mine.request("small", "why")
    attached = mine.request("mid", "why")
    mine.attach(attached.job_id)
    mine.poll()
    other = theirs.request("big", "why")
    [cancelled] = mine.shutdown()
    assert cancelled.id == pending.id and cancelled.state is RequestState.CANCELLED
    assert cancelled.outcome == ("Slurm job 100 (profile 'small') was cancelled: the driver worker that "
                                 "asked for it shut down")
    assert mine.cancelled == ["100"]
    assert {r.id for r in store.live()} == {attached.id, other.id}  # attached keeps running; b's stays
    assert mine.shutdown() == []
    # A driver still running asks again at once: a shutdown is no reason to hold the profile off.
    again = theirs.request("small", "why")
    assert again.state is RequestState.PENDING and again.job_id != pending.job_id


def test_a_request_is_settled_once_when_it_stops_waiting(clock: Clock) -> None:
    """The backend's hook (Slurm: remove the job's credentials file) runs once per request, by the process
    that moved it on: when its worker attaches, or it ends without one; never while it waits."""
    store = MemoryRequestStore()
    fake = FakeProvisioner(PROFILES, store, clock=clock)
    other = FakeProvisioner(PROFILES, store, clock=clock)  # another driver polling the same store and cluster
    other.jobs = fake.jobs
    attaching, timing_out, failing = (fake.request(name, "why") for name in ("small", "mid", "big"))
    assert fake.poll() == [] and other.poll() == []
    assert fake.settled == [] and other.settled == []
    fake.attach(attaching.job_id)
    fake.end(failing.job_id, "FAILED")
    fake.poll()
    assert sorted(fake.settled) == sorted([attaching.id, failing.id])
    fake.end(attaching.job_id)  # an attached job ending: nothing was waiting any more
    clock.now += 31
    other.poll()
    fake.poll()
    assert other.settled == [timing_out.id]
    assert sorted(fake.settled) == sorted([attaching.id, failing.id])
    # Shutdown settles what it cancels; a refused submission had nothing to settle.
    clock.now += 200
    parked = fake.request("small", "again")
    fake.refuse["mid"] = "sbatch: error: no"
    refused = fake.request("mid", "again")
    assert refused.state is RequestState.FAILED
    assert [r.id for r in fake.shutdown()] == [parked.id]
    assert fake.settled[-1] == parked.id and refused.id not in fake.settled


def test_status_shows_each_profile_idle_or_its_job(fake: FakeProvisioner, clock: Clock) -> None:
    request = fake.request("small", "run r1 node a waits for a worker labelled 'cluster'")
    fake.jobs[request.job_id].why = "Resources"
    clock.now += 12.34
    fake.poll()
    rows = {row["profile"]: row for row in fake.status()}
    assert list(rows) == ["big", "small", "mid"]
    assert rows["big"] == {"profile": "big", "kind": "fake", "host": "local", "state": "idle",
                           "shape": {"cpus": 16, "gpus": 2, "ram_mb": 64_000}, "labels": ["cluster", "gpu"],
                           "last": None, "job_id": None, "job_state": None, "job_reason": None, "pending_s": None,
                           "machine": None, "reason": None}
    assert {k: rows["small"][k] for k in ("state", "job_id", "job_state", "job_reason", "pending_s", "machine",
                                          "reason")} == {
        "state": "pending", "job_id": "100", "job_state": "PENDING", "job_reason": "Resources", "pending_s": 12.3,
        "machine": "slurm-small-100", "reason": "run r1 node a waits for a worker labelled 'cluster'"}
    clock.now += 30
    fake.poll()
    small = next(row for row in fake.status() if row["profile"] == "small")
    assert small["state"] == "idle" and "was cancelled" in small["last"]


def test_the_poller_polls_and_reports_changes(fake: FakeProvisioner) -> None:
    seen: list[list[MachineRequest]] = []
    request = fake.request("small", "why")
    fake.attach(request.job_id)
    poller = Poller(fake, interval_s=0.01, on_change=seen.append).start()
    try:
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        poller.stop()
    assert seen and seen[0][0].state is RequestState.ATTACHED


def test_the_memory_store_never_resurrects_an_ended_request(fake: FakeProvisioner, clock: Clock) -> None:
    request = fake.request("small", "why")
    ended = request.model_copy(update={"state": RequestState.CANCELLED, "ended_at": clock.now, "outcome": "x"})
    assert fake.store.update(ended)
    assert not fake.store.update(request.model_copy(update={"job_state": "RUNNING"}))
    assert fake.store.live() == [] and fake.store.last("small") == ended


def test_create_provisioner_makes_a_slurm_one_or_none() -> None:
    assert create_provisioner([], Settings()) is None
    slurm = create_provisioner(PROFILES, Settings())
    assert slurm is not None and slurm.kind == "slurm" and list(slurm.profiles) == ["big", "small", "mid"]
