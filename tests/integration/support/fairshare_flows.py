"""Flows of the fair-sharing tests (test_fairshare.py); workers register them through FLUKSIO_FLOWS.

Nodes leave marks in ``TEST_FLUKSIO_MARKS`` that the tests read: when each call started (and ended), and
which attempt it was on (a first attempt that fails leaves a mark its retry finds).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from fluksio import Flow, Resources

#: Folder where nodes leave marks the tests wait for (set by the test harness).
MARKS = Path(os.environ.get("TEST_FLUKSIO_MARKS", "/tmp/fluksio-test-marks"))
#: Longest a node waits for the test to let it go, in seconds.
GATE_S = 120.0


def mark(name: str, text: str = "") -> None:
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / name).write_text(text)


def first_time(tag: str) -> bool:
    """True for the first call that asks with this tag (it leaves a mark the next one finds)."""
    try:
        MARKS.mkdir(parents=True, exist_ok=True)
        (MARKS / f"{tag}.first").touch(exist_ok=False)
        return True
    except FileExistsError:
        return False


gpu_turn = Flow("gpu_turn", inputs={"tag": str}, outputs=["x"])


@gpu_turn.node(provides="x", device="gpu", resources=Resources(cpus=1, gpus=1))
def take_the_gpu(tag: str) -> str:
    """Marks when it got the GPU; the 'blocker' holds it until the test opens the gate."""
    mark(f"turn.{time.time_ns()}.{tag}")
    deadline = time.monotonic() + GATE_S
    while tag == "blocker" and not (MARKS / "gate.blocker").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return tag


licensed = Flow("licensed", inputs={"tag": str, "items": list[int], "pause": (float, 0.6)}, outputs=["done"])


@licensed.node(provides="done", map={"item": "items"}, device="pooled", pool="licenses")
def use_a_license(item: int, tag: str, pause: float) -> int:
    """Holds a license for ``pause`` seconds; its mark says when, and where."""
    started = time.time()
    time.sleep(pause)
    mark(f"pool.{tag}.{item}", f"{started} {time.time()} {os.getpid()}")
    return item


licensed_forever = Flow("licensed_forever", inputs={"tag": str}, outputs=["x"])


@licensed_forever.node(provides="x", device="victim", pool="licenses")
def hold_a_license(tag: str) -> str:
    mark(f"{tag}.{os.getpid()}", "started")
    time.sleep(3600)
    return tag


hungry = Flow("hungry", inputs={"tag": str, "how": (str, "raise")}, outputs=["x"])


@hungry.node(provides="x", device="pooled", resources=Resources(ram_mb=1000), retries=2, escalate_ram=2.0,
             retry_on=(TimeoutError,))
def run_out_of_memory_once(tag: str, how: str) -> str:
    """Runs out of memory on its first attempt: raises MemoryError, or is killed by SIGKILL as the kernel's
    OOM killer kills (``how="kill"``). retry_on names no MemoryError: running out is retried all the same."""
    if first_time(tag):
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise MemoryError("simulated: the allocation failed")
    return tag


hungry_gpu = Flow("hungry_gpu", inputs={"tag": str}, outputs=["x"])


@hungry_gpu.node(provides="x", device="gpu", resources=Resources(cpus=1, gpus=1, ram_mb=500), retries=1,
                 escalate_ram=3.0)
def gpu_child_killed_once(tag: str) -> str:
    """A GPU call runs in a child process of its own: the OOM killer kills that one."""
    if first_time(tag):
        os.kill(os.getpid(), signal.SIGKILL)
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


backoff = Flow("backoff", inputs={"tag": str}, outputs=["x"])


@backoff.node(provides="x", device="solo", retries=1, retry_backoff_s=2.0, retry_backoff_max_s=2.0,
              retry_on=("TimeoutError",))
def time_out_once(tag: str) -> str:
    if first_time(tag):
        raise TimeoutError("the service did not answer")
    return tag


quick = Flow("quick", inputs={"tag": str}, outputs=["x"])


@quick.node(provides="x", device="solo")
def quick_call(tag: str) -> str:
    return tag


picky = Flow("picky", inputs={"tag": str}, outputs=["x"])


@picky.node(provides="x", device="pooled", retries=3, retry_on=(TimeoutError, "ConnectionError"))
def fail_with_a_value_error(tag: str) -> str:
    mark(f"{tag}.{time.time_ns()}", "attempt")
    raise ValueError(f"bad input {tag!r}")
