"""Flows the distributed tests run; workers register them through FLUKSIO_FLOWS."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fluksio import Flow, Resources

#: Folder where nodes leave marks the tests wait for (set by the test harness).
MARKS = Path(os.environ.get("TEST_FLUKSIO_MARKS", "/tmp/fluksio-test-marks"))

spread = Flow("spread", inputs={"width": (int, 6), "pause": (float, 0.4)})
for index in range(8):
    def work(width: int, pause: float, _index: int = index) -> int:
        if _index < width:
            time.sleep(pause)
        return _index

    spread.node(work, name=f"work{index}", provides=f"out{index}", requires=["width", "pause"])


gpu_pair = Flow("gpu_pair")
for index in range(3):
    def visible(_index: int = index) -> str:
        time.sleep(0.8)
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")

    gpu_pair.node(visible, name=f"gpu{index}", provides=f"devices{index}", requires=[], device="gpu",
                  resources=Resources(cpus=1, gpus=1))


two_gpus = Flow("two_gpus", outputs=["devices"])


@two_gpus.node(provides="devices", device="gpu", resources=Resources(cpus=1, gpus=2))
def both() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


oversized = Flow("oversized", outputs=["x"])


@oversized.node(provides="x", device="gpu", resources=Resources(cpus=64, gpus=8, ram_mb=10))
def huge() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


prefer = Flow("prefer", outputs=["x"])


@prefer.node(provides="x", device="tpu", device_policy="prefer")
def anywhere() -> int:
    return 1


late = Flow("late", outputs=["x"])


@late.node(provides="x", device="late")
def on_late_machine() -> int:
    return 7


fragile = Flow("fragile", inputs={"tag": str}, outputs=["x"])


@fragile.node(provides="x", device="fragile", retries=1)
def slow_then_done(tag: str) -> str:
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{os.getpid()}").write_text("started")
    time.sleep(4)
    return tag


fragile_once = Flow("fragile_once", inputs={"tag": str}, outputs=["x"])


@fragile_once.node(provides="x", device="fragile")
def slow_no_retry(tag: str) -> str:
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{os.getpid()}").write_text("started")
    time.sleep(30)
    return tag


hold_gpus = Flow("hold_gpus", inputs={"pause": (float, 2.0)}, outputs=["devices"])


@hold_gpus.node(provides="devices", device="gpu", resources=Resources(cpus=1, gpus=2))
def hold(pause: float) -> str:
    time.sleep(pause)
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


marked = Flow("marked", inputs={"tag": str}, outputs=["x"])


@marked.node(provides="x")
def leave_mark(tag: str) -> str:
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{time.time_ns()}").write_text("ran")
    return tag


stuck = Flow("stuck", inputs={"tag": str}, outputs=["x"])


@stuck.node(provides="x")
def sleep_forever(tag: str) -> str:
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{os.getpid()}").write_text("started")
    time.sleep(3600)
    return tag
