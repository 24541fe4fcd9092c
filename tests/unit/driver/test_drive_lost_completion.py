"""A call whose worker ended it, but whose completion never reached the driver, does not hold its run forever."""

from __future__ import annotations

import pytest

from fluksio import Flow
from fluksio.broker.inbox.base import WAKE_UP
from fluksio.broker.inbox.memory import MemoryInbox
from fluksio.messages import Completion, InboxMessage, NodeCall
from fluksio.runtime import Runtime
from fluksio.store.run_rows import get_run, node_rows
from tests.unit.driver.drives import answer, drive_with, hop


@pytest.fixture
def runtime(make_runtime):
    # A completion is given up on once its grant has been given back for a heartbeat's lifetime.
    return make_runtime(cpus=2, heartbeat_interval_s=0.05, heartbeat_ttl_s=0.2)


def flow_with_retries(retries: int) -> Flow:
    flow = Flow(f"lossy_{retries}", outputs=["x"])
    flow.node(hop, name="x", provides="x", requires=[], retries=retries)
    return flow


def lose_the_first_completion(runtime: Runtime, flow: Flow):
    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        if call.attempt == 1:  # the worker ends the call and gives its grant back; its report is lost
            runtime.placer.release(call.grant)
            return
        answer(runtime, flow, call)

    return dispatch


def test_a_lost_completion_is_settled_as_an_error_and_the_node_retried(runtime):
    flow = flow_with_retries(1)
    run_id = drive_with(runtime, flow, lose_the_first_completion(runtime, flow))
    assert get_run(runtime.db, run_id).status == "ok"
    rows = sorted(node_rows(runtime.db, run_id), key=lambda r: r.attempt)
    assert [(r.attempt, r.status) for r in rows] == [(1, "error"), (2, "ok")]
    assert "its completion was lost on the way to the driver" in rows[0].error


def test_without_retries_a_lost_completion_ends_the_run_saying_so(runtime):
    flow = flow_with_retries(0)
    run_id = drive_with(runtime, flow, lose_the_first_completion(runtime, flow))
    run = get_run(runtime.db, run_id)
    assert run.status == "error"
    assert "completion was lost" in run.status_reason


def answering(runtime: Runtime, flow: Flow, sent: list[int]):
    """A worker that answers every call at once, noting in ``sent`` the attempt of each call it was sent."""

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        sent.append(call.attempt)
        answer(runtime, flow, call)

    return dispatch


class ReplyLosingInbox(MemoryInbox):
    """Hands out its first completion into a dropped connection: the driver never hears it, yet the
    message is on the taken list (as Redis's BLMOVE leaves it)."""

    def __init__(self) -> None:
        super().__init__()
        self.taken: list[InboxMessage] = []

    def pop(self, run_id: str, timeout: float) -> InboxMessage | None:
        message = super().pop(run_id, timeout)
        if isinstance(message, Completion) and not self.taken:
            self.taken.append(message)
            return None
        return message

    def recover(self, run_id: str) -> list[InboxMessage]:
        return list(self.taken)


def test_a_completion_whose_reply_was_lost_is_recovered_from_the_taken_list_not_run_again(runtime):
    runtime.inbox = ReplyLosingInbox()
    flow = flow_with_retries(0)
    sent: list[int] = []
    run_id = drive_with(runtime, flow, answering(runtime, flow, sent))
    assert runtime.inbox.taken  # the reply was lost indeed
    assert get_run(runtime.db, run_id).status == "ok"
    assert [(r.attempt, r.status) for r in node_rows(runtime.db, run_id)] == [(1, "ok")]
    assert sent == [1]  # its result was kept: the node did not run again


class StuckBehindWakes(MemoryInbox):
    """Hands out a wake-up in place of each completion, which stays queued: as on a busy driver, whose
    completion waits behind wake-ups it has not got to. Only taking all that waits (``drain``) reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.stuck: list[InboxMessage] = []

    def pop(self, run_id: str, timeout: float) -> InboxMessage | None:
        message = super().pop(run_id, timeout)
        if isinstance(message, Completion):
            self.stuck.append(message)
            return WAKE_UP
        return message

    def drain(self, run_id: str, limit: int) -> list[InboxMessage]:
        taken, self.stuck = self.stuck, []
        return taken + super().drain(run_id, limit)


def test_a_completion_queued_behind_other_messages_is_taken_not_declared_lost(runtime):
    runtime.inbox = StuckBehindWakes()
    flow = flow_with_retries(1)
    sent: list[int] = []
    run_id = drive_with(runtime, flow, answering(runtime, flow, sent))
    assert get_run(runtime.db, run_id).status == "ok"
    assert [(r.attempt, r.status) for r in node_rows(runtime.db, run_id)] == [(1, "ok")]
    assert sent == [1]


def test_a_completion_pushed_checks_after_its_grant_was_given_back_still_counts(make_runtime):
    # The worker gave its grant back and then stalled (a loaded host) for three of the driver's checks: its
    # completion is late, not lost, while the grant has been given back for less than a heartbeat's lifetime.
    runtime = make_runtime(cpus=2, heartbeat_interval_s=0.05, heartbeat_ttl_s=60)
    flow = flow_with_retries(1)
    sent: list[NodeCall] = []
    checks: list[set[str]] = []
    given_back = runtime.placer.given_back

    def counting_given_back(grants):
        found = given_back(grants)
        checks.append(found)
        if len([c for c in checks if c]) == 3:  # the third check that saw the grant given back
            answer(runtime, flow, sent[0])  # (its grant, given back already, is not given back twice)
        return found

    runtime.placer.given_back = counting_given_back

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        sent.append(call)
        runtime.placer.release(call.grant)  # the completion follows three checks later

    run_id = drive_with(runtime, flow, dispatch)
    assert get_run(runtime.db, run_id).status == "ok"
    assert [(r.attempt, r.status) for r in node_rows(runtime.db, run_id)] == [(1, "ok")]
    assert [call.attempt for call in sent] == [1]
    assert len([c for c in checks if c]) >= 3


def test_a_completion_pushed_just_before_its_machine_left_is_taken_not_settled_as_lost(runtime):
    # The worker ended the call, pushed its completion and left (a scale-down) while the driver was behind.
    runtime.inbox = StuckBehindWakes()
    flow = flow_with_retries(0)
    machine = runtime.placer.machines()[0].name

    def dispatch(call: NodeCall, _queue: str, _display: str) -> None:
        answer(runtime, flow, call)
        runtime.placer.detach(machine)

    run_id = drive_with(runtime, flow, dispatch)
    assert get_run(runtime.db, run_id).status == "ok"
    assert [(r.attempt, r.status) for r in node_rows(runtime.db, run_id)] == [(1, "ok")]
