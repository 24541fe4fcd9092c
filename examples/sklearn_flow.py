"""A scikit-learn project as a flow: fitted models travel between nodes as values, metrics need no declaration.

Needs ``pip install 'fluksio[data,sklearn]'``; run it with
``fluksio run examples/sklearn_flow.py:flow -p n_alphas=5 --seed 1``. The graph::

    load ─► split ─► fit ×n (map over alphas: one Ridge pipeline each) ─► pick ─► predict
    propose ─────────┘                                                    └─► evaluate (a subflow: a child run)
                                                                                 └─► judge ─► publish (if good enough)

Each fitted pipeline is stored through skops (codec ``sklearn``, never pickle) and arrives at ``pick``, on
whichever machine runs it, as a pipeline that predicts the same. ``fluksio show RUN`` names the codec of
every stored model and lists the metrics the nodes emitted without declaring them: ``train_r2[0]`` …
one per alpha, and ``test_r2`` (one step per alpha). The best pipeline then crosses into a child run that
evaluates it on its own (``evaluate``), and is published only when that score reaches ``threshold``. The
diabetes data ships with scikit-learn: no download.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from fluksio import Flow, Message

evaluation = Flow(
    "diabetes_evaluation",
    inputs={"model": Pipeline, "X_test": np.ndarray, "y_test": np.ndarray},
    outputs=["r2", "mean_abs_error"],
)


@evaluation.node(provides=["r2", "mean_abs_error"])
def evaluate(model: Pipeline, X_test: np.ndarray, y_test: np.ndarray) -> dict:
    """The model as it arrived in this child run, scored on data it never saw."""
    errors = np.abs(model.predict(X_test) - y_test)
    return {"r2": round(float(model.score(X_test, y_test)), 6), "mean_abs_error": round(float(errors.mean()), 3)}


flow = Flow(
    "diabetes",
    inputs={"n_alphas": (int, 5), "test_size": (float, 0.25), "seed": int, "threshold": (float, 0.3)},
    outputs=["best", "best_alpha", "best_r2", "predictions", "confirmed_r2", "published"],
)


@flow.node(provides="frame")
def load() -> pd.DataFrame:
    """Ten features of 442 patients and a measure of their disease a year later."""
    return load_diabetes(as_frame=True).frame


@flow.node(provides=["X_train", "X_test", "y_train", "y_test"])
def split(frame: pd.DataFrame, test_size: float, seed: int) -> dict[str, np.ndarray]:
    features = frame.drop(columns="target").to_numpy()
    X_train, X_test, y_train, y_test = train_test_split(features, frame["target"].to_numpy(), test_size=test_size,
                                                        random_state=seed)
    return {"X_train": X_train, "X_test": X_test, "y_train": y_train, "y_test": y_test}


@flow.node(provides="alphas")
def propose(n_alphas: int) -> list[float]:
    """``n_alphas`` regularisation strengths on a log scale from 0.001 to 100."""
    return [round(float(alpha), 6) for alpha in np.logspace(-3, 2, n_alphas)]


@flow.node(provides="models", map={"alpha": "alphas"})
def fit(alpha: float, X_train: np.ndarray, y_train: np.ndarray, emit) -> Pipeline:
    model = make_pipeline(StandardScaler(), Ridge(alpha=alpha)).fit(X_train, y_train)
    emit("train_r2", model.score(X_train, y_train))  # element i's series is train_r2[i]
    return model


@flow.node(provides=["best", "best_alpha", "best_r2"])
def pick(models: list[Pipeline], alphas: list[float], X_test: np.ndarray, y_test: np.ndarray, emit) -> dict:
    scores = [model.score(X_test, y_test) for model in models]
    for score in scores:
        emit("test_r2", score)  # one step per alpha, in the order proposed
    best = int(np.argmax(scores))
    return {"best": models[best], "best_alpha": alphas[best], "best_r2": round(scores[best], 6)}


@flow.node(provides="predictions")
def predict(best: Pipeline, X_test: np.ndarray) -> np.ndarray:
    return best.predict(X_test)


# The best pipeline, a value like any other, is the child run's input; its outputs come back as messages.
flow.subflow(evaluation, name="evaluate", params={"model": Message("best")},
             provides={"r2": "confirmed_r2", "mean_abs_error": "mean_abs_error"})


@flow.node(provides="good_enough")
def judge(confirmed_r2: float, threshold: float) -> bool:
    return confirmed_r2 >= threshold


@flow.node(provides="published", when="good_enough")
def publish(best_alpha: float, confirmed_r2: float, mean_abs_error: float) -> dict:
    """Only when the child run's score reaches the threshold (else skipped, and ``published`` is null)."""
    return {"alpha": best_alpha, "r2": confirmed_r2, "mean_abs_error": mean_abs_error}
