"""Flows the run explorer's tests run (the explorer's process registers them through FLUKSIO_FLOWS)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fluksio import Artifact, Flow


def gate(tag: str) -> Path:
    """The file a held node waits for: ``$TEST_FLUKSIO_MARKS/<tag>.go`` (read per call: tests set the folder)."""
    return Path(os.environ.get("TEST_FLUKSIO_MARKS", "/tmp/fluksio-test-marks")) / f"{tag}.go"


curves = Flow("curves", inputs={"lr": (float, 0.1), "steps": (int, 12), "seed": (int, 0)},
              outputs=["model", "final_loss"])


@curves.node(provides="start")
def prepare(lr: float, seed: int) -> float:
    print(f"preparing lr={lr} seed={seed}")
    return 1.0 + seed * 0.01


@curves.node(provides=["model", "final_loss"], streams=["loss", "accuracy"])
def fit(start: float, lr: float, steps: int, emit) -> dict[str, object]:
    """``loss`` = start·(1 - lr)^step and ``accuracy`` = 1 - loss/2 per step: values a test can recompute."""
    loss = start
    for step in range(steps):
        loss = start * (1 - lr) ** step
        emit("loss", loss)
        emit("accuracy", 1 - loss / 2)
    return {"model": Artifact.from_bytes(f"weights lr={lr}".encode(), name="model.txt"), "final_loss": loss}


long_series = Flow("long_series", inputs={"count": (int, 5000)}, outputs=["n"])


@long_series.node(provides="n", streams=["signal"])
def emit_many(count: int, emit) -> int:
    for step in range(count):
        emit("signal", float(step % 100) if step != count // 2 else 1000.0)  # one spike in the middle
    return count


held = Flow("held", inputs={"tag": str}, outputs=["x"])


@held.node(provides="x", cache=False)
def wait_for_gate(tag: str) -> str:
    """Runs until the test creates the gate file (at most 120 s), so a page can see it running."""
    deadline = time.monotonic() + 120
    while not gate(tag).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return tag


failing = Flow("failing", inputs={"batch": (int, 7)}, outputs=["x"])


@failing.node(provides="x")
def explode(batch: int) -> int:
    print(f"loading batch {batch}")
    raise ValueError(f"bad batch {batch}")
