"""The provisioner's bookkeeping, on the in-memory fake: one outstanding request per profile, attach,
attach timeout (cancel, and say why), jobs that end, shutdown, and what `fluksio placer` shows.

Submissions run on the provisioner's own thread; most tests wait for them (the ``submitted`` fixture);
those at the end hold a submission up (the fake's ``gate``) to show what happens meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

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
from tests.unit.provisioners.racing import ask_at_once

#: The ``submitted`` fixture (conftest.py): ask, and wait for the submission to return.
Submitted = Callable[..., MachineRequest]


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


def test_request_is_idempotent_per_profile(fake: FakeProvisioner, submitted: Submitted) -> None:
    first = submitted(fake, "small", "run r1 node a waits for a worker labelled 'cluster'")
    again = fake.request(fake.profiles["small"], "run r2 node b waits for a worker labelled 'cluster'")
    assert again == first and len(fake.jobs) == 1
    assert first.job_id == "100" and first.machine == "slurm-small-100" and first.state is RequestState.PENDING
    assert first.reason == "run r1 node a waits for a worker labelled 'cluster'"
    other = submitted(fake, "mid")
    assert other.job_id == "101" and len(fake.jobs) == 2


def test_racing_requests_submit_one_job(clock: Clock) -> None:
    store = MemoryRequestStore()
    drivers = [FakeProvisioner(PROFILES, store, clock=clock) for _ in range(8)]
    results = ask_at_once(drivers, "small")
    assert sum(len(d.jobs) for d in drivers) == 1
    assert len({r.id for r in results}) == 1


def test_an_unknown_profile_is_an_error(fake: FakeProvisioner) -> None:
    with pytest.raises(ProvisionError, match="no provisioner profile named 'nope' \\(known: big, small, mid\\)"):
        fake.request("nope", "why")


def test_a_worker_that_attaches_ends_the_request_and_the_next_one_is_new(
        fake: FakeProvisioner, clock: Clock, submitted: Submitted) -> None:
    first = submitted(fake, "small", "why")
    clock.now += 5
    assert fake.poll() == []  # still pending
    fake.attach(first.job_id)
    [attached] = fake.poll()
    assert attached.state is RequestState.ATTACHED and attached.attached_at == clock.now
    assert attached.describe(clock.now) == "Slurm job 100 (profile 'small') is attached as slurm-small-100"
    # Attached is no longer outstanding: a node that still waits may ask for another machine.
    second = submitted(fake, "small", "more work")
    assert second.job_id == "101"


def test_a_worker_that_does_not_attach_in_time_is_cancelled_and_says_why(
        fake: FakeProvisioner, clock: Clock, submitted: Submitted) -> None:
    request = submitted(fake, "big", "run r1 node fit waits for a worker labelled 'gpu'")
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
    assert submitted(fake, "big", "again").job_id == "101"


def test_a_job_that_ends_before_its_worker_attaches_fails(fake: FakeProvisioner, submitted: Submitted) -> None:
    request = submitted(fake, "small", "why")
    fake.end(request.job_id, "FAILED")
    [failed] = fake.poll()
    assert failed.state is RequestState.FAILED
    assert failed.outcome == "Slurm job 100 (profile 'small') ended (FAILED) before its worker attached"
    assert fake.cancelled == []


def test_an_attached_job_that_ends_is_finished(fake: FakeProvisioner, clock: Clock,
                                               submitted: Submitted) -> None:
    request = submitted(fake, "small", "why")
    fake.attach(request.job_id)
    fake.poll()
    clock.now += 300
    fake.end(request.job_id)  # its worker was idle and exited
    [finished] = fake.poll()
    assert finished.state is RequestState.FINISHED
    assert finished.outcome == ("Slurm job 100 (profile 'small') ended (COMPLETED) after its worker "
                                "(slurm-small-100) attached")
    assert fake.store.live() == []


def test_a_job_slurm_has_forgotten_is_gone(fake: FakeProvisioner, submitted: Submitted) -> None:
    request = submitted(fake, "small", "why")
    fake.attach(request.job_id)
    fake.poll()
    fake.end(request.job_id)
    fake.purge(request.job_id)
    [finished] = fake.poll()
    assert finished.outcome == ("Slurm job 100 (profile 'small') is no longer known to Slurm after its worker "
                                "(slurm-small-100) attached")


def test_an_unreachable_scheduler_changes_nothing_but_the_attach_timeout_still_holds(
        fake: FakeProvisioner, clock: Clock, submitted: Submitted) -> None:
    request = submitted(fake, "small", "why")
    fake.poll()
    fake.unreachable = "squeue failed: Unable to contact slurm controller"
    clock.now += 10
    assert fake.poll() == [] and fake.current("small").state is RequestState.PENDING
    clock.now += 20
    [cancelled] = fake.poll()
    assert cancelled.state is RequestState.CANCELLED and fake.cancelled == [request.job_id]
    assert cancelled.outcome.endswith("(Slurm said: PENDING, Priority)")  # its last known state


def test_a_timeout_without_any_known_state_says_so(fake: FakeProvisioner, clock: Clock,
                                                   submitted: Submitted) -> None:
    submitted(fake, "small", "why")
    fake.unreachable = "ssh: connect to host login1 port 22: Connection refused"
    clock.now += 30
    [cancelled] = fake.poll()
    assert cancelled.outcome.endswith("within 30s (its Slurm state could not be read)")


def test_a_refused_submission_fails_and_is_not_retried_at_once(fake: FakeProvisioner, clock: Clock,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    fake.refuse["big"] = "sbatch refused the job: Requested node configuration is not available (exit 1)"
    asked = fake.request("big", "why")
    assert asked.state is RequestState.PENDING and asked.job_id is None  # sbatch has not answered yet
    assert fake.join_submissions(10)
    failed = fake.current("big")
    assert failed.id == asked.id and failed.state is RequestState.FAILED and failed.job_id is None
    assert failed.outcome == ("could not submit a Slurm job for profile 'big': sbatch refused the job: "
                              "Requested node configuration is not available (exit 1)")
    assert failed.hold_until == clock.now + 120 and fake.store.live() == []
    assert failed.outcome in caplog.text
    del fake.refuse["big"]
    assert fake.request("big", "why") == failed  # held off: what a waiting run is told
    assert fake.join_submissions(10) and fake.jobs == {}
    clock.now += 120
    assert fake.request("big", "why").state is RequestState.PENDING
    assert fake.join_submissions(10) and list(fake.jobs) == ["100"]


def test_a_submission_that_never_finished_is_given_up(fake: FakeProvisioner, clock: Clock,
                                                      submitted: Submitted) -> None:
    # A driver reserved the profile, then died before sbatch answered.
    stuck = MachineRequest(id="x", profile="small", reason="why", owner="dead:1", submitted_at=clock.now)
    assert fake.store.reserve(stuck) is None
    assert fake.request("small", "why") == stuck
    clock.now += 3
    assert stuck.describe(clock.now) == ("submitting a Slurm job for profile 'small' "
                                         "(waiting for sbatch's answer for 3s)")
    clock.now += 28
    [failed] = fake.poll()
    assert failed.state is RequestState.FAILED and "never finished" in failed.outcome
    assert fake.request("small", "why").state is RequestState.FAILED  # retry window
    clock.now += 120
    assert submitted(fake, "small", "why").job_id == "100"


def test_shutdown_cancels_only_this_processes_outstanding_requests(clock: Clock, submitted: Submitted) -> None:
    store = MemoryRequestStore()
    mine = FakeProvisioner(PROFILES, store, clock=clock, owner="driver-a")
    theirs = FakeProvisioner(PROFILES, store, clock=clock, owner="driver-b")
    pending = submitted(mine, "small", "why")
    attached = submitted(mine, "mid", "why")
    mine.attach(attached.job_id)
    mine.poll()
    other = submitted(theirs, "big", "why")
    [cancelled] = mine.shutdown()
    assert cancelled.id == pending.id and cancelled.state is RequestState.CANCELLED
    assert cancelled.outcome == ("Slurm job 100 (profile 'small') was cancelled: the driver worker that "
                                 "asked for it shut down")
    assert mine.cancelled == ["100"]
    assert {r.id for r in store.live()} == {attached.id, other.id}  # attached keeps running; b's stays
    assert mine.shutdown() == []
    # A driver still running asks again at once: a shutdown is no reason to hold the profile off.
    again = submitted(theirs, "small", "why")
    assert again.state is RequestState.PENDING and again.job_id != pending.job_id


def test_a_request_is_settled_once_when_it_stops_waiting(clock: Clock, submitted: Submitted) -> None:
    """The backend's hook (Slurm: remove the job's credentials file) runs once per request, by the process
    that moved it on: when its worker attaches, or it ends without one; never while it waits."""
    store = MemoryRequestStore()
    fake = FakeProvisioner(PROFILES, store, clock=clock)
    other = FakeProvisioner(PROFILES, store, clock=clock)  # another driver polling the same store and cluster
    other.jobs = fake.jobs
    attaching, timing_out, failing = (submitted(fake, name, "why") for name in ("small", "mid", "big"))
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
    parked = submitted(fake, "small", "again")
    fake.refuse["mid"] = "sbatch: error: no"
    refused = submitted(fake, "mid", "again")
    assert refused.state is RequestState.FAILED
    assert [r.id for r in fake.shutdown()] == [parked.id]
    assert fake.settled[-1] == parked.id and refused.id not in fake.settled


def test_status_shows_each_profile_idle_or_its_job(fake: FakeProvisioner, clock: Clock,
                                                   submitted: Submitted) -> None:
    request = submitted(fake, "small", "run r1 node a waits for a worker labelled 'cluster'")
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


def test_the_poller_polls_and_reports_changes(fake: FakeProvisioner, submitted: Submitted) -> None:
    seen: list[list[MachineRequest]] = []
    request = submitted(fake, "small", "why")
    fake.attach(request.job_id)
    poller = Poller(fake, interval_s=0.01, on_change=seen.append).start()
    try:
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        poller.stop()
    assert seen and seen[0][0].state is RequestState.ATTACHED


def test_the_memory_store_never_resurrects_an_ended_request(fake: FakeProvisioner, clock: Clock,
                                                            submitted: Submitted) -> None:
    request = submitted(fake, "small", "why")
    ended = request.model_copy(update={"state": RequestState.CANCELLED, "ended_at": clock.now, "outcome": "x"})
    assert fake.store.update(ended)
    assert not fake.store.update(request.model_copy(update={"job_state": "RUNNING"}))
    assert fake.store.live() == [] and fake.store.last("small") == ended


def test_create_provisioner_makes_a_slurm_one_or_none() -> None:
    assert create_provisioner([], Settings()) is None
    slurm = create_provisioner(PROFILES, Settings())
    assert slurm is not None and slurm.kind == "slurm" and list(slurm.profiles) == ["big", "small", "mid"]


# -- submissions run off the caller's thread ----------------------------------------------------------------
# A driver asks from its loop, which must go on collecting results and refreshing its run's lease while a
# slow login node takes its time: the fake's gate holds a submission up as a slow sbatch would.


@pytest.fixture
def slow(fake: FakeProvisioner) -> Iterator[FakeProvisioner]:
    """The fake, its submissions held at the gate until the test opens it."""
    fake.gate = threading.Event()
    try:
        yield fake
    finally:
        fake.gate.set()  # never leave a submitting thread waiting
        fake.join_submissions(10)


def test_request_returns_at_once_while_sbatch_has_not_answered(slow: FakeProvisioner, clock: Clock) -> None:
    started = time.monotonic()
    asked = slow.request("small", "run r1 node a waits for a worker labelled 'cluster'")
    assert time.monotonic() - started < 1.0
    assert slow.at_gate.wait(5)  # the submission is under way, on the provisioner's thread
    assert asked.state is RequestState.PENDING and asked.job_id is None and slow.jobs == {}
    clock.now += 4
    assert asked.describe(clock.now) == ("submitting a Slurm job for profile 'small' "
                                         "(waiting for sbatch's answer for 4s)")
    assert slow.current("small") == asked and slow.store.outstanding("small") == asked
    [row] = [row for row in slow.status() if row["profile"] == "small"]
    assert (row["state"], row["job_id"], row["pending_s"]) == ("pending", None, 4.0)
    assert not slow.join_submissions(0.05)
    # Asking again meanwhile gets the same request: still one submission.
    assert slow.request("small", "run r2 node b waits") == asked
    # sbatch answers: the request has its job id, and what a waiting run is told says so.
    slow.gate.set()
    assert slow.join_submissions(5)
    submitted = slow.current("small")
    assert (submitted.id, submitted.job_id, submitted.machine) == (asked.id, "100", "slurm-small-100")
    assert submitted.state is RequestState.PENDING and list(slow.jobs) == ["100"]
    assert submitted.describe(clock.now) == "asked Slurm for a machine: job 100 (profile 'small') submitted for 4s"
    assert slow.request("small", "again") == submitted


def test_racing_requests_of_one_process_submit_one_job(slow: FakeProvisioner) -> None:
    barrier = threading.Barrier(8)
    answers: list[MachineRequest] = []

    def ask(i: int) -> None:
        barrier.wait()
        answers.append(slow.request("small", f"run r{i} waits"))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(answers) == 8 and len({a.id for a in answers}) == 1
    slow.gate.set()
    assert slow.join_submissions(5)
    assert list(slow.jobs) == ["100"] and slow.current("small").job_id == "100"


def test_a_failing_submission_ends_the_request_failed_and_holds_the_profile_off(slow: FakeProvisioner,
                                                                                clock: Clock) -> None:
    slow.refuse["mid"] = "sbatch on login1 refused the job: invalid partition (exit 1)"
    asked = slow.request("mid", "why")
    assert asked.state is RequestState.PENDING
    slow.gate.set()
    assert slow.join_submissions(5)
    failed = slow.current("mid")
    assert (failed.id, failed.state, failed.hold_until) == (asked.id, RequestState.FAILED, clock.now + 120)
    assert failed.outcome == ("could not submit a Slurm job for profile 'mid': sbatch on login1 refused the job: "
                              "invalid partition (exit 1)")
    assert slow.request("mid", "again") == failed


def test_an_unexpected_error_while_submitting_fails_the_request_and_never_reaches_the_caller(
        fake: FakeProvisioner, caplog: pytest.LogCaptureFixture) -> None:
    def broken(profile: SlurmProfile, request: MachineRequest) -> str:
        raise RuntimeError("boom")

    fake._submit = broken  # type: ignore[method-assign]
    assert fake.request("small", "why").state is RequestState.PENDING
    assert fake.join_submissions(5)
    failed = fake.current("small")
    assert failed.state is RequestState.FAILED and failed.hold_until is not None
    assert failed.outcome == "could not submit a Slurm job for profile 'small': boom"
    assert "RuntimeError: boom" in caplog.text  # a bug is logged with its traceback


def test_a_job_submitted_while_its_request_was_given_up_is_cancelled(clock: Clock) -> None:
    """Another process judged the submission stale (past the attach timeout) and failed the request while
    sbatch ran: the job it returns is cancelled and settled, never left behind."""
    store = MemoryRequestStore()
    slow = FakeProvisioner(PROFILES, store, clock=clock, owner="driver-a")
    slow.gate = threading.Event()
    other = FakeProvisioner(PROFILES, store, clock=clock, owner="driver-b")
    asked = slow.request("small", "why")
    assert slow.at_gate.wait(5)
    clock.now += 31
    [given_up] = other.poll()
    assert given_up.id == asked.id and "never finished" in given_up.outcome
    slow.gate.set()
    assert slow.join_submissions(5)
    assert slow.cancelled == ["100"] and slow.jobs["100"].state == "CANCELLED"
    assert slow.settled == [asked.id]
    assert store.live() == [] and store.last("small") == given_up


def test_shutdown_during_a_submission_leaves_no_job(slow: FakeProvisioner) -> None:
    asked = slow.request("small", "why")
    queued = slow.request("mid", "why")  # waits behind the first: never submitted
    assert slow.at_gate.wait(5)
    done: list[list[MachineRequest]] = []
    stopping = threading.Thread(target=lambda: done.append(slow.shutdown(timeout_s=10)))
    stopping.start()
    # Other drivers stop waiting for it at once: the request ends in the store before sbatch answers.
    deadline = time.monotonic() + 5
    while slow.store.last("small") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slow.store.last("small").state is RequestState.CANCELLED
    assert stopping.is_alive()  # shutdown waits for the submission in flight
    slow.gate.set()
    stopping.join(10)
    [cancelled] = done
    assert {r.id for r in cancelled} == {asked.id, queued.id}
    assert slow.store.last("small").outcome == ("the Slurm submission for profile 'small' was cancelled: the "
                                                "driver worker that asked for it shut down")
    assert list(slow.jobs) == ["100"]  # the queued one never reached sbatch
    assert slow.cancelled == ["100"] and slow.jobs["100"].state == "CANCELLED"
    assert slow.settled == [asked.id]
    assert slow.store.live() == []
    # Asked again after shutdown: nothing is submitted, and the profile is free for drivers elsewhere.
    late = slow.request("big", "why")
    assert late.state is RequestState.CANCELLED and "shut down" in late.outcome
    assert slow.join_submissions(1) and list(slow.jobs) == ["100"] and slow.store.live() == []


def test_shutdown_waits_a_bounded_time_for_a_submission(slow: FakeProvisioner,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    slow.request("small", "why")
    assert slow.at_gate.wait(5)
    started = time.monotonic()
    [cancelled] = slow.shutdown(timeout_s=0.2)
    assert 0.2 <= time.monotonic() - started < 5
    assert cancelled.state is RequestState.CANCELLED
    assert "was still running at shutdown" in caplog.text and "fluksio-small" in caplog.text
    # If sbatch answers after all (the process lived on), its job is still cancelled.
    slow.gate.set()
    assert slow.join_submissions(5)
    assert slow.cancelled == ["100"]


def test_the_poller_reports_a_finished_submission(slow: FakeProvisioner) -> None:
    seen: list[list[MachineRequest]] = []
    poller = Poller(slow, interval_s=60, on_change=seen.append).start()
    try:
        asked = slow.request("small", "why")
        assert slow.at_gate.wait(5) and seen == []
        slow.gate.set()
        assert slow.join_submissions(5)
        assert [[r.id for r in batch] for batch in seen] == [[asked.id]] and seen[0][0].job_id == "100"
    finally:
        poller.stop()
    slow.request("mid", "why")
    assert slow.join_submissions(5) and len(seen) == 1  # a stopped poller is told nothing


def test_a_job_that_cannot_be_recorded_is_cancelled_and_the_next_submission_still_goes(
        clock: Clock, submitted: Submitted) -> None:
    class Flaky(MemoryRequestStore):
        """Redis away for a moment: the first write of a job id fails."""

        failed = False

        def update(self, request: MachineRequest) -> bool:
            if request.job_id is not None and not self.failed:
                self.failed = True
                raise ConnectionError("Redis is restarting")
            return super().update(request)

    fake = FakeProvisioner(PROFILES, Flaky(), clock=clock)
    lost = fake.request("small", "why")
    assert fake.join_submissions(5)
    assert fake.cancelled == ["100"] and fake.settled == [lost.id]  # nobody could ever have found that job
    assert submitted(fake, "mid").job_id == "101"  # the submitting thread lives on


def test_a_job_id_recorded_while_shutdown_reads_the_store_is_still_cancelled(clock: Clock) -> None:
    """sbatch answers just as shutdown looks at the store: shutdown saw the request without a job id, and
    the submission must not record one it will never cancel (it cancels the job itself)."""
    fake: FakeProvisioner

    class Racing(MemoryRequestStore):
        armed = False

        def live(self) -> list[MachineRequest]:
            seen = super().live()
            if self.armed:  # shutdown's look: sbatch answers right after it
                self.armed = False
                fake.gate.set()
                assert fake.join_submissions(5)
            return seen

    store = Racing()
    fake = FakeProvisioner(PROFILES, store, clock=clock)
    fake.gate = threading.Event()
    asked = fake.request("small", "why")
    assert fake.at_gate.wait(5)
    store.armed = True
    [cancelled] = fake.shutdown(timeout_s=5)
    assert cancelled.id == asked.id and cancelled.job_id is None
    assert fake.cancelled == ["100"] and fake.settled == [asked.id] and fake.store.live() == []
