"""A cancelled parent's children schedule nothing more: a child whose node waits for a machine never starts it
once the parent is cancelled, even when the cancel itself frees the machine (issue #31, item 7)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fluksio import Flow, RunStatus, Settings, connect

pytestmark = pytest.mark.integration

#: Parents cancelled per test: the grant that raced the cancel came about one time in two.
TRIES = 20


class Starts:
    """Which children's node started, and whether the parent's cancel had begun by then."""

    def __init__(self) -> None:
        self.cancel_begun = threading.Event()
        self.release = threading.Event()
        self._seen: list[tuple[float, bool]] = []
        self._changed = threading.Condition()

    def start(self, lr: float) -> None:
        with self._changed:
            self._seen.append((lr, self.cancel_begun.is_set()))
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self._seen) >= count, timeout)

    def after_cancel(self) -> list[float]:
        with self._changed:
            return [lr for lr, late in self._seen if late]

    def reset(self) -> None:
        with self._changed:
            self._seen.clear()
        self.cancel_begun.clear()
        self.release.clear()


def flows(starts: Starts) -> Flow:
    child = Flow("tree_child", inputs={"lr": float}, outputs=["model"])

    @child.node(provides="model", cache=False)
    def fit(lr: float) -> float:
        starts.start(lr)
        # Short waits, not one long one: the cancel interrupts the call by raising in this thread, which only
        # happens between bytecodes.
        while not starts.release.wait(0.01):
            pass
        return lr

    parent = Flow("tree_parent", inputs={"lrs": list[float]}, outputs=["models"])
    parent.subflow(child, name="trial", map={"lr": "lrs"}, provides={"model": "models"})
    return parent


def test_a_child_waiting_for_a_machine_never_starts_its_node_once_its_parent_is_cancelled(tmp_path: Path) -> None:
    """Two cpus, three children: two run, the third waits for a cpu. Cancelling the parent kills the two, which
    frees their cpus; the third must not take one and start."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", artifacts_dir=tmp_path / "a", cpus=2,
                        lease_interval_s=0.2)
    starts = Starts()
    parent = flows(starts)
    late: dict[int, list[float]] = {}
    with connect(settings) as client:
        for attempt in range(TRIES):
            starts.reset()
            run = client.submit(parent, {"lrs": [0.1, 0.2, 0.3]})
            assert starts.wait_for(2, timeout=30), "two children never started their node"
            # The third child is driven and its node waits on the placer (the two cpus are taken).
            deadline = time.monotonic() + 30
            while not any(w["run_id"] != run.id for w in client.placement()["waiting"]):
                assert time.monotonic() < deadline, "the third child's node never waited for a cpu"
                starts.wait_for(3, timeout=0.01)
            starts.cancel_begun.set()
            client.cancel(run.id)
            record = run.wait(timeout=30)
            children = [client.handle(c.id).wait(timeout=30) for c in client.runs(parent=run.id)]
            starts.release.set()
            assert record.status is RunStatus.CANCELLED, record.status_reason
            assert [c.status for c in children] == [RunStatus.CANCELLED] * 3
            if starts.after_cancel():
                late[attempt] = starts.after_cancel()
    assert not late, f"in {len(late)} of {TRIES} tries a child started its node after its parent was cancelled"
