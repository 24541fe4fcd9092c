"""Flows with subflows that the distributed tests run; workers register them through FLUKSIO_FLOWS."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fluksio import Flow, Resources

#: Folder where nodes leave marks the tests wait for (set by the test harness).
MARKS = Path(os.environ.get("TEST_FLUKSIO_MARKS", "/tmp/fluksio-test-marks"))

train = Flow("sub_train", inputs={"lr": float, "epochs": int, "seed": int, "tag": str},
             outputs=["model", "accuracy"])


@train.node(provides="model", streams=["loss"], resources=Resources(cpus=1), cache=False)
def sub_fit(lr: float, epochs: int, seed: int, tag: str, emit) -> float:
    """Leaves ``MARKS/<tag>.<lr>.<pid>.<ns>``; holds while ``MARKS/<tag>.hold`` exists (at most 60 s); fails
    while ``MARKS/<tag>.fail-<lr>`` exists."""
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{lr}.{os.getpid()}.{time.time_ns()}").write_text("started")
    deadline = time.monotonic() + 60
    while (MARKS / f"{tag}.hold").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    if (MARKS / f"{tag}.fail-{lr}").exists():
        raise RuntimeError(f"diverged at lr={lr}")
    for step in range(epochs):
        emit("loss", lr / (step + 1))
    return lr * epochs


@train.node(provides="accuracy", cache=False)
def sub_score(model: float, seed: int) -> float:
    return round(1 - abs(model - 0.4) + seed / 1000, 6)


search = Flow("sub_search", inputs={"n": int, "epochs": int, "seed": int, "tag": str}, outputs=["best"])


@search.node(provides="lrs", cache=False)
def sub_propose(n: int, seed: int) -> list[float]:
    return [round(0.02 * (i + 1), 4) for i in range(n)]


search.subflow(train, name="trial", map={"lr": "lrs"}, provides={"accuracy": "accuracies", "model": "models"})


@search.node(provides="best", cache=False)
def sub_pick(accuracies: list[float], lrs: list[float]) -> dict:
    best = max(range(len(lrs)), key=accuracies.__getitem__)
    return {"lr": lrs[best], "accuracy": accuracies[best]}


leaf = Flow("sub_leaf", inputs={"x": int}, outputs=["y"])
leaf.node(lambda x: x * 10, name="times_ten", provides="y", cache=False)
middle = Flow("sub_middle", inputs={"x": int}, outputs=["y"])
middle.subflow(leaf, name="deeper", provides=["y"])
top = Flow("sub_top", inputs={"xs": list[int]}, outputs=["ys"])
top.subflow(middle, name="each", map={"x": "xs"}, provides={"y": "ys"})
