"""A hyperparameter search decided at run time: propose learning rates, train each as a child run, keep the best.

Run it with ``fluksio run examples/search.py:search -p n=6 --seed 1``; then ``fluksio runs --parent RUN``
lists the six trials, each a run of ``train`` with its own nodes, loss curve and cache entries, and
``fluksio show RUN`` links each ``trial[i]`` to its child run. Run it again: every trial is restored
from the run cache, so the parent's rows say ``cached``.

    propose ─► trial ×n (subflow: a run of `train` per learning rate) ─► pick
"""

from __future__ import annotations

import random

from fluksio import Flow

train = Flow("train", inputs={"lr": float, "epochs": (int, 80), "seed": int}, outputs=["weights", "accuracy"])


@train.node(provides="samples")
def generate(seed: int) -> list[list[float]]:
    """Points on y = 3x - 2 with Gaussian noise, as [x, y] pairs."""
    rng = random.Random(seed)
    return [[x, 3 * x - 2 + rng.gauss(0, 0.3)] for x in (rng.uniform(-1, 1) for _ in range(200))]


@train.node(provides="weights", streams=["loss"])
def fit(samples: list[list[float]], lr: float, epochs: int, emit) -> list[float]:
    w = b = 0.0
    for _ in range(epochs):
        grad_w = sum((w * x + b - y) * x for x, y in samples) * 2 / len(samples)
        grad_b = sum(w * x + b - y for x, y in samples) * 2 / len(samples)
        w, b = w - lr * grad_w, b - lr * grad_b
        emit("loss", sum((w * x + b - y) ** 2 for x, y in samples) / len(samples))
    return [w, b]


@train.node(provides="accuracy")
def evaluate(weights: list[float], samples: list[list[float]]) -> float:
    """1 - the mean absolute error, clipped at 0: higher is better."""
    w, b = weights
    return round(max(0.0, 1 - sum(abs(w * x + b - y) for x, y in samples) / len(samples)), 6)


search = Flow("search", inputs={"n": (int, 6), "epochs": (int, 80), "seed": int}, outputs=["best"])


@search.node(provides="lrs")
def propose(n: int, seed: int) -> list[float]:
    """``n`` learning rates on a log scale from 0.001 to 0.5."""
    return [round(0.001 * (500 ** (i / max(1, n - 1))), 5) for i in range(n)]


search.subflow(train, name="trial", map={"lr": "lrs"}, provides={"accuracy": "accuracies", "weights": "models"})


@search.node(provides="best")
def pick(accuracies: list[float], lrs: list[float], models: list[list[float]]) -> dict:
    best = max(range(len(lrs)), key=accuracies.__getitem__)
    return {"lr": lrs[best], "accuracy": accuracies[best], "weights": models[best]}
