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


metered = Flow("metered", inputs={"lr": (float, 0.5), "steps": (int, 8), "pause": (float, 0.05)},
               outputs=["score"])


@metered.node(provides="start")
def prepare(lr: float) -> float:
    return 1.0 + lr


@metered.node(provides="weights", streams=["loss"])
def train(start: float, lr: float, steps: int, pause: float, emit) -> float:
    value = start
    for _ in range(steps):
        value *= 1.0 - lr / 2
        emit("loss", value)
        time.sleep(pause)
    return value


@metered.node(provides="score")
def evaluate(weights: float) -> float:
    return round(1.0 - weights, 6)


gated = Flow("gated", inputs={"tag": str}, outputs=["x"])


@gated.node(provides="x")
def wait_for_gate(tag: str) -> str:
    """Runs until the test creates ``MARKS/<tag>.go`` (at most 60 s), so a watcher can attach first."""
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.started").write_text("started")
    deadline = time.monotonic() + 60
    while not (MARKS / f"{tag}.go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return tag


broken = Flow("broken", inputs={"batch": (int, 7)}, outputs=["x"])


@broken.node(provides="x")
def explode(batch: int) -> int:
    print(f"loading batch {batch}")
    raise ValueError(f"bad batch {batch}")


slow_chain = Flow("slow_chain", inputs={"tag": str, "pause": (float, 1.5)}, outputs=["d"])


@slow_chain.node(provides="a", retries=2, cache=False)
def step_a(tag: str, pause: float) -> int:
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{os.getpid()}.{time.time_ns()}").write_text("a")
    time.sleep(pause)
    return 1


@slow_chain.node(provides="b", retries=2, cache=False, streams=["progress"])
def step_b(a: int, pause: float, emit) -> int:
    for i in range(10):
        emit("progress", i)
        time.sleep(pause / 10)
    return a + 1


@slow_chain.node(provides="c", retries=2, cache=False)
def step_c(b: int, pause: float) -> int:
    time.sleep(pause)
    return b + 1


@slow_chain.node(provides="d", retries=2, cache=False)
def step_d(c: int) -> int:
    return c + 1


tiny = Flow("tiny", inputs={"i": int}, outputs=["out"])


@tiny.node(provides="out", streams=["m"], cache=False)
def tiny_node(i: int, emit) -> int:
    for step in range(10):
        emit("m", i + step)
    return i


# -- mapped nodes ------------------------------------------------------------------------------------

mapped_marks = Flow("mapped_marks", inputs={"tag": str, "items": list[int], "pause": (float, 0.2)},
                    outputs=["spans"])


@mapped_marks.node(provides="spans", map={"item": "items"}, resources=Resources(cpus=1))
def mark_element(item: int, tag: str, pause: float) -> list[float]:
    """Leaves ``MARKS/<tag>.<item>.<pid>.<ns>`` and returns when it ran."""
    MARKS.mkdir(parents=True, exist_ok=True)
    started = time.time()
    (MARKS / f"{tag}.{item}.{os.getpid()}.{time.time_ns()}").write_text("ran")
    time.sleep(pause)
    return [started, time.time()]


gpu_map = Flow("gpu_map", inputs={"items": list[int]}, outputs=["devices"])


@gpu_map.node(provides="devices", map={"item": "items"}, device="gpu", resources=Resources(cpus=1, gpus=1))
def element_devices(item: int) -> list:
    started = time.time()
    time.sleep(0.6)
    return [os.environ.get("CUDA_VISIBLE_DEVICES", ""), started, time.time()]


stuck_map = Flow("stuck_map", inputs={"tag": str, "items": list[int]}, outputs=["x"])


@stuck_map.node(provides="x", map={"item": "items"}, resources=Resources(cpus=1))
def element_forever(item: int, tag: str) -> int:
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{item}.{os.getpid()}").write_text("started")
    time.sleep(3600)
    return item


flaky_map = Flow("flaky_map", inputs={"tag": str, "items": list[int]}, outputs=["ys"])


@flaky_map.node(provides="ys", map={"item": "items"}, cache=False)
def element_fails_while_flagged(item: int, tag: str) -> int:
    """Element 2 fails while ``MARKS/<tag>.fail`` exists; every call leaves a mark."""
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{item}.{time.time_ns()}").write_text("ran")
    if item == 2 and (MARKS / f"{tag}.fail").exists():
        raise RuntimeError("flagged to fail")
    return item * 10


gated_map = Flow("gated_map", inputs={"tag": str, "items": list[int]}, outputs=["x"])


@gated_map.node(provides="x", map={"item": "items"}, resources=Resources(cpus=1))
def element_at_gate(item: int, tag: str) -> int:
    """Leaves ``MARKS/<tag>.<item>.<pid>.<ns>`` (one per start) and runs until the test creates
    ``MARKS/gate-<tag>`` (at most 60 s)."""
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{item}.{os.getpid()}.{time.time_ns()}").write_text("started")
    deadline = time.monotonic() + 60
    while not (MARKS / f"gate-{tag}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return item


soak_map = Flow("soak_map", inputs={"tag": str, "items": list[int], "factor": int, "pause": (float, 0.5)},
                outputs=["scaled", "total"])


@soak_map.node(provides="scaled", map={"item": "items"}, resources=Resources(cpus=1), retries=6, cache=False)
def scale_element(item: int, tag: str, factor: int, pause: float) -> int:
    """Leaves ``MARKS/<tag>.<factor>.<item>.<pid>.<ns>`` (one per start: a fault soak counts the calls run again),
    pauses, and returns ``item * factor``. Retried: a machine lost under it is one of the faults it survives."""
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{factor}.{item}.{os.getpid()}.{time.time_ns()}").write_text("started")
    time.sleep(pause)
    return item * factor


@soak_map.node(provides="total", retries=6, cache=False)
def add_up(scaled: list[int]) -> int:
    return sum(scaled)
