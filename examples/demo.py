"""A small training run in pure Python: fit a line by gradient descent, stream the loss, keep the model.

Run it with ``fluksio demo`` or ``fluksio run examples/demo.py:flow -p lr=0.05 --seed 1``.
The graph::

    generate ─► split ─┬─► fit (streams "loss") ─► evaluate ─► rmse
                       └─► baseline ──────────────────────────► baseline_rmse
"""

from __future__ import annotations

import json
import logging
import random

from fluksio import Artifact, Flow

log = logging.getLogger(__name__)

flow = Flow(
    "demo",
    inputs={
        "lr": (float, 0.1),
        "epochs": (int, 200),
        "n_samples": (int, 400),
        "noise": (float, 0.3),
        "seed": int,
    },
    outputs=["model", "weights", "rmse", "baseline_rmse"],
)


@flow.node(provides="samples")
def generate(n_samples: int, noise: float, seed: int) -> dict[str, list[float]]:
    """Points on y = 3x - 2, with Gaussian noise."""
    rng = random.Random(seed)
    xs = [rng.uniform(-1, 1) for _ in range(n_samples)]
    ys = [3 * x - 2 + rng.gauss(0, noise) for x in xs]
    print(f"generated {n_samples} samples (noise {noise}, seed {seed})")
    return {"x": xs, "y": ys}


@flow.node(provides=["train", "test"])
def split(samples: dict[str, list[float]]) -> dict[str, dict[str, list[float]]]:
    cut = int(len(samples["x"]) * 0.8)
    return {
        "train": {"x": samples["x"][:cut], "y": samples["y"][:cut]},
        "test": {"x": samples["x"][cut:], "y": samples["y"][cut:]},
    }


@flow.node(provides=["model", "weights"], streams=["loss"])
def fit(train: dict[str, list[float]], lr: float, epochs: int, emit) -> dict[str, object]:
    """Full-batch gradient descent on mean squared error; emits the loss every epoch."""
    w, b = 0.0, 0.0
    xs, ys = train["x"], train["y"]
    n = len(xs)
    for _epoch in range(epochs):
        errors = [w * x + b - y for x, y in zip(xs, ys)]
        emit("loss", sum(e * e for e in errors) / n)
        w -= lr * 2 * sum(e * x for e, x in zip(errors, xs)) / n
        b -= lr * 2 * sum(errors) / n
    print(f"fitted w={w:.3f} b={b:.3f}")
    model = Artifact.from_bytes(json.dumps({"w": w, "b": b}).encode(), name="model.json")
    return {"model": model, "weights": {"w": w, "b": b}}


@flow.node(provides="rmse")
def evaluate(model: Artifact, test: dict[str, list[float]]) -> float:
    params = json.loads(model.read_bytes())
    errors = [params["w"] * x + params["b"] - y for x, y in zip(test["x"], test["y"])]
    return (sum(e * e for e in errors) / len(errors)) ** 0.5


@flow.node(provides="baseline_rmse")
def baseline(train: dict[str, list[float]], test: dict[str, list[float]]) -> float:
    """Predict the training mean: what the model has to beat."""
    mean = sum(train["y"]) / len(train["y"])
    return (sum((y - mean) ** 2 for y in test["y"]) / len(test["y"])) ** 0.5
