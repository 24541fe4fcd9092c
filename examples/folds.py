"""k-fold cross-validation as a mapped node: one training call per fold, published only if it is good enough.

Run it with ``fluksio run examples/folds.py -p k=5 --seed 1`` (``-p threshold=0.1`` to see it refuse).
The graph::

    generate ─► folds ─► train_fold ×k (map, streams "loss") ─► mean_score ─► good_enough
                                                                     │               │
                                              publish (when good_enough) ◄───────────┤
                                              explain (unless good_enough) ◄─────────┘
                                                         └──────► report (joins both branches)

Each fold is one call, placed like any node; its losses are the series ``loss[0]`` … ``loss[k-1]``;
``fluksio show`` folds the k rows into one line. A rerun with the same data restores every fold from
the run cache.
"""

from __future__ import annotations

import random

from fluksio import Flow

flow = Flow(
    "folds",
    inputs={"k": (int, 5), "n_samples": (int, 300), "epochs": (int, 60), "lr": (float, 0.2),
            "threshold": (float, 0.4), "seed": int},
    outputs=["scores", "mean", "report"],
)


@flow.node(provides="samples")
def generate(n_samples: int, seed: int) -> list[list[float]]:
    """Points on y = 3x - 2 with Gaussian noise, as [x, y] pairs."""
    rng = random.Random(seed)
    return [[x, 3 * x - 2 + rng.gauss(0, 0.3)] for x in (rng.uniform(-1, 1) for _ in range(n_samples))]


@flow.node(provides="fold_ids")
def folds(k: int) -> list[int]:
    return list(range(k))


@flow.node(provides="scores", map={"fold": "fold_ids"}, streams=["loss"])
def train_fold(fold: int, k: int, samples: list[list[float]], epochs: int, lr: float, emit) -> float:
    """Fit y = w·x + b on every fold but ``fold`` by gradient descent; the held-out fold's RMSE."""
    held_out = [p for i, p in enumerate(samples) if i % k == fold]
    train = [p for i, p in enumerate(samples) if i % k != fold]
    w = b = 0.0
    for _ in range(epochs):
        grad_w = sum((w * x + b - y) * x for x, y in train) * 2 / len(train)
        grad_b = sum(w * x + b - y for x, y in train) * 2 / len(train)
        w, b = w - lr * grad_w, b - lr * grad_b
        emit("loss", sum((w * x + b - y) ** 2 for x, y in train) / len(train))
    return round((sum((w * x + b - y) ** 2 for x, y in held_out) / len(held_out)) ** 0.5, 6)


@flow.node(provides="mean")
def mean_score(scores: list[float]) -> float:
    return round(sum(scores) / len(scores), 6)


@flow.node(provides="good_enough")
def compare(mean: float, threshold: float) -> bool:
    return mean < threshold


@flow.node(provides="release", when="good_enough")
def publish(mean: float) -> str:
    return f"published: mean held-out RMSE {mean}"


@flow.node(provides="refusal", unless="good_enough")
def explain(mean: float, threshold: float) -> str:
    return f"not published: mean held-out RMSE {mean} is not below {threshold}"


@flow.node(provides="report")
def report(release: str | None = None, refusal: str | None = None) -> str:
    return release or refusal or ""
