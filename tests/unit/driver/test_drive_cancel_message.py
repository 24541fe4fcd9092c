"""A cancel message is acted on only when the run's row asks for a cancel: one sent again (or forged) on a
run's inbox stops nothing."""

from __future__ import annotations

import threading

import pytest

from fluksio import Flow, RunStatus, Settings, connect
from fluksio.messages import Cancel


def test_a_cancel_message_the_row_does_not_hold_is_ignored(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    gate, started = threading.Event(), threading.Event()
    flow = Flow("gated_cancel")

    @flow.node(provides="x", cache=False)
    def wait() -> int:
        started.set()
        gate.wait(30)
        return 1

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", artifacts_dir=tmp_path / "a", cpus=2)
    with connect(settings) as client:
        handle = client.submit(flow)
        assert started.wait(30)
        client._runtime.inbox.push(handle.id, Cancel())  # no cancel was asked for: the row says no
        ignored = f"run {handle.id}: ignoring a cancel message its row does not ask for"
        deadline = threading.Event()
        for _ in range(300):
            if ignored in caplog.text:
                break
            deadline.wait(0.01)
        gate.set()
        record = handle.wait(timeout=30)
        assert ignored in caplog.text
        assert record.status is RunStatus.OK and record.result == {"x": 1}
        # A real cancel (the row asks) still stops a run.
        gate.clear()
        started.clear()
        second = client.submit(flow)
        assert started.wait(30)
        client.cancel(second.id)
        gate.set()
        assert second.wait(timeout=30).status is RunStatus.CANCELLED
