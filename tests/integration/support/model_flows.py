"""Flows whose nodes hand fitted models to each other: the scikit-learn example, XGBoost and LightGBM models, and
pipelines holding transformers of their own (one listed in FLUKSIO_TRUSTED_TYPES by the tests, one never).

Registered by module name (``tests.integration.support.model_flows``) so that the workers and the test process
import the very same module: skops makes ``Clip`` again from its module's name. The nodes that make a model
prefer machine ``alpha`` and those that use one ``beta``: on the embedded default (no such machines) they run
on the one machine there is.
"""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import xgboost as xgb
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.datasets import load_diabetes, load_iris
from sklearn.linear_model import Ridge
from sklearn.pipeline import Pipeline, make_pipeline

from examples.sklearn_flow import flow as diabetes  # noqa: F401 - registered with the rest of this module
from fluksio import Flow

MAKER = {"device": "alpha", "device_policy": "prefer"}
USER = {"device": "beta", "device_policy": "prefer"}


def iris() -> tuple[np.ndarray, np.ndarray]:
    """The iris measurements, and each flower's species by name (a classifier's classes as strings)."""
    X, y = load_iris(return_X_y=True)
    return X, np.array(["setosa", "versicolor", "virginica"], dtype=object)[y]


def fit_xgboost() -> xgb.XGBRegressor:
    return xgb.XGBRegressor(n_estimators=20, max_depth=3, random_state=0).fit(*load_diabetes(return_X_y=True))


def fit_lightgbm() -> lgb.LGBMClassifier:
    return lgb.LGBMClassifier(n_estimators=20, num_leaves=7, random_state=0, verbose=-1).fit(*iris())


boosters = Flow("boosters", outputs=["regressor", "classifier", "said"])


@boosters.node(provides=["regressor", "classifier"], **MAKER)
def fit_boosters() -> dict:
    return {"regressor": fit_xgboost(), "classifier": fit_lightgbm()}


@boosters.node(provides="said", **USER)
def use_boosters(regressor: xgb.XGBRegressor, classifier: lgb.LGBMClassifier) -> dict:
    """What each model predicts here, and the classes it knows (compared by the test with what it reads)."""
    return {"regression": regressor.predict(load_diabetes(return_X_y=True)[0]).tolist(),
            "species": classifier.predict(iris()[0]).tolist(),
            "probabilities": classifier.predict_proba(iris()[0]).tolist(),
            "classes": classifier.classes_.tolist(), "types": [type(regressor).__name__, type(classifier).__name__]}


class Clip(TransformerMixin, BaseEstimator):
    """Clips each feature to ±limit: a transformer of the project's own, which skops does not trust."""

    def __init__(self, limit: float = 0.05) -> None:
        self.limit = limit

    def fit(self, X, y=None):  # noqa: ANN001, ANN201 - scikit-learn's signature
        return self

    def transform(self, X):  # noqa: ANN001, ANN201
        return np.clip(X, -self.limit, self.limit)


class Unlisted(Clip):
    """The same, but never listed in FLUKSIO_TRUSTED_TYPES."""


def clipped_pipeline(transformer: str) -> Pipeline:
    step = {"clip": Clip, "unlisted": Unlisted}[transformer]()
    return make_pipeline(step, Ridge(alpha=0.1)).fit(*load_diabetes(return_X_y=True))


clipped = Flow("clipped", inputs={"transformer": str}, outputs=["model", "predicted"])


@clipped.node(provides="model", **MAKER)
def fit_clipped(transformer: str) -> Pipeline:
    return clipped_pipeline(transformer)


@clipped.node(provides="predicted", **USER)
def use_clipped(model: Pipeline) -> list[float]:
    return model.predict(load_diabetes(return_X_y=True)[0]).tolist()


metrics = Flow("metrics_anywhere", inputs={"bad": (str, "")}, outputs=["done"])


@metrics.node(provides="done")
def measure(bad: str, emit) -> bool:
    for step in range(3):
        emit("accuracy", 0.5 + step / 10)  # declared nowhere
    if bad:
        emit("accuracy", {"nan": float("nan"), "str": "high"}[bad])  # refused here
    return True
