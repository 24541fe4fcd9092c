"""Waiting for a run from Python: Ctrl-C while waiting (a notebook's interrupt too) cancels the run as
`fluksio run` does, unless asked not to; code in an event loop awaits the run without blocking the loop."""

from __future__ import annotations

import _thread
import asyncio
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import Client, Flow, RunRecord, RunStatus, Settings, connect
from fluksio.client import RunHandle

#: Longest a held node waits for its gate, in seconds: a test that fails never leaves a call behind for long.
HELD_S = 60.0


class Held:
    """A flow whose one node starts, says so, and waits for the test to open its gate."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.gate = threading.Event()
        self.flow = Flow(f"held_{id(self)}", inputs={"tag": (str, "a")}, outputs=["x"])

        @self.flow.node(provides="x", cache=False)
        def hold(tag: str) -> str:
            self.started.set()
            return tag if self.gate.wait(HELD_S) else "never let through"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    with connect(Settings(database_url=f"sqlite:///{tmp_path / 'runs.db'}", artifacts_dir=tmp_path / "artifacts",
                          cpus=2, lease_interval_s=0.5)) as embedded:
        yield embedded


@pytest.fixture
def held() -> Iterator[Held]:
    flow = Held()
    try:
        yield flow
    finally:
        flow.gate.set()  # calls left running by a cancel end too


def interrupt_while_waiting(held: Held) -> threading.Thread:
    """Ctrl-C at this process (SIGINT's KeyboardInterrupt in the main thread) once the held node has started and
    the main thread waits for a run (is inside ``RunHandle._wait``), as a person presses it at a waiting cell."""
    main = threading.main_thread().ident

    def waiting() -> bool:
        frame = sys._current_frames().get(main or 0)
        while frame is not None:
            if frame.f_code is RunHandle._wait.__code__:
                return True
            frame = frame.f_back
        return False

    def interrupt() -> None:
        deadline = time.monotonic() + HELD_S
        while not (held.started.is_set() and waiting()):
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)
        _thread.interrupt_main()

    thread = threading.Thread(target=interrupt, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_while_waiting_cancels_the_run(client: Client, held: Held) -> None:
    run = client.submit(held.flow)
    interrupter = interrupt_while_waiting(held)
    with pytest.raises(KeyboardInterrupt):
        run.wait(timeout=HELD_S)
    interrupter.join()
    assert run.wait(timeout=30).status is RunStatus.CANCELLED  # the cancel was sent: it ends, its gate still shut
    assert not held.gate.is_set()


def test_ctrl_c_while_waiting_leaves_the_run_running_when_asked(client: Client, held: Held) -> None:
    run = client.submit(held.flow)
    interrupter = interrupt_while_waiting(held)
    with pytest.raises(KeyboardInterrupt):
        run.wait(timeout=HELD_S, cancel_on_interrupt=False)
    interrupter.join()
    assert run.status is RunStatus.RUNNING
    held.gate.set()
    assert run.wait(timeout=30).status is RunStatus.OK


def test_ctrl_c_while_waiting_for_a_sweep_cancels_each_of_its_runs(client: Client, held: Held) -> None:
    sweep = client.sweep(held.flow, {"tag": ["a", "b"]})
    interrupter = interrupt_while_waiting(held)
    with pytest.raises(KeyboardInterrupt):
        sweep.wait(timeout=HELD_S)
    interrupter.join()
    assert [r.wait(timeout=30).status for r in sweep.runs] == [RunStatus.CANCELLED, RunStatus.CANCELLED]


def test_a_run_is_awaited_in_an_event_loop_that_runs_on_meanwhile(client: Client, held: Held) -> None:
    run = client.submit(held.flow, {"tag": "awaited"})

    async def meanwhile() -> None:
        """Other work of the loop, which must go on while the run is awaited: it lets the held node through."""
        deadline = time.monotonic() + HELD_S
        while not held.started.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        held.gate.set()

    async def both() -> RunRecord:
        record, _ = await asyncio.gather(run.wait_async(timeout=HELD_S), meanwhile())
        return record

    record = asyncio.run(both())
    # A wait that blocked the loop would have kept the gate shut until the node gave up.
    assert record.status is RunStatus.OK and record.result == {"x": "awaited"}


def test_awaiting_a_run_times_out_and_leaves_it_running(client: Client, held: Held) -> None:
    run: RunHandle = client.submit(held.flow)
    assert held.started.wait(HELD_S)
    with pytest.raises(TimeoutError, match=rf"run {run.id} is still running after 0.2 s"):
        asyncio.run(run.wait_async(timeout=0.2))
    assert run.status is RunStatus.RUNNING
    held.gate.set()
    assert asyncio.run(run.wait_async(timeout=30)).status is RunStatus.OK
