"""Fitted models and undeclared metrics on the embedded default (SQLite and PostgreSQL): the scikit-learn example
flow's pipelines cross nodes and predict the same, XGBoost and LightGBM models too; a type skops does not trust
is refused by name until the settings list it; metrics need no declaration, and a bad one is reported at the
node's own line."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from fluksio import Client, RunRecord, RunStatus, Settings, connect
from tests.integration.support import model_flows as flows

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLIP = f"{flows.Clip.__module__}.Clip"
UNLISTED = f"{flows.Unlisted.__module__}.Unlisted"


def node_of(record: RunRecord, name: str) -> Any:
    return next(n for n in record.nodes if n.node == name)


def refit(alpha: float, seed: int, test_size: float = 0.25) -> tuple[Pipeline, np.ndarray]:
    """What the example's nodes do, here in the test: the pipeline for ``alpha``, and the test features."""
    frame = load_diabetes(as_frame=True).frame
    X_train, X_test, y_train, _ = train_test_split(frame.drop(columns="target").to_numpy(), frame["target"].to_numpy(),
                                                   test_size=test_size, random_state=seed)
    return make_pipeline(StandardScaler(), Ridge(alpha=alpha)).fit(X_train, y_train), X_test


def check_the_example_run(client: Client, record: RunRecord, n_alphas: int, cached: bool = False) -> None:
    """The run of the scikit-learn example: a pipeline per alpha, the best of them predicting as one fit here,
    the codec named in the artifact rows (of the run that made them), and the metrics no node declared in the
    series."""
    assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    assert sorted(n.index for n in record.nodes if n.node == "fit") == list(range(n_alphas))
    best = client.output(record.id, "best")
    assert type(best) is Pipeline and type(best.steps[-1][1]) is Ridge
    local, X_test = refit(record.result["best_alpha"], seed=record.seed or 0)
    np.testing.assert_allclose(best.predict(X_test), local.predict(X_test), rtol=1e-12)
    np.testing.assert_array_equal(client.output(record.id, "predictions"), best.predict(X_test))
    codecs = {(a.node, a.message, a.codec) for a in client.artifacts(record.id)}
    if not cached:
        assert {("fit", "models", "sklearn"), ("pick", "best", "sklearn"), ("load", "frame", "pandas")} <= codecs
    # The best pipeline crossed into a child run (the subflow `evaluate`), which scored it as `pick` did, and
    # it was published behind the threshold.
    evaluated = node_of(record, "evaluate")
    assert evaluated.child_run is not None and client.get(evaluated.child_run).status is RunStatus.OK
    assert record.result["confirmed_r2"] == pytest.approx(record.result["best_r2"], abs=1e-6)
    if record.result["confirmed_r2"] >= record.params.get("threshold", 0.3):
        assert record.result["published"]["r2"] == record.result["confirmed_r2"]
    series = client.metrics(record.id)
    assert sorted(series) == ["test_r2", *(f"train_r2[{i}]" for i in range(n_alphas))]
    assert [step for step, _ in series["test_r2"]] == list(range(n_alphas))
    assert max(value for _, value in series["test_r2"]) == pytest.approx(record.result["best_r2"], abs=1e-6)
    assert all(len(series[f"train_r2[{i}]"]) == 1 for i in range(n_alphas))


def test_the_example_flow_hands_its_fitted_pipelines_from_node_to_node(client: Client) -> None:
    record = client.submit(flows.diabetes, {"n_alphas": 4}, seed=3).wait(timeout=180)
    check_the_example_run(client, record, 4)


def test_a_model_below_the_threshold_is_evaluated_but_not_published(client: Client) -> None:
    record = client.submit(flows.diabetes, {"n_alphas": 2, "threshold": 0.99}, seed=3).wait(timeout=180)
    assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    assert record.result["confirmed_r2"] < 0.99 and record.result["published"] is None
    assert node_of(record, "publish").status.value == "skipped"


def test_a_rerun_restores_every_node_and_their_undeclared_metrics_follow(client: Client) -> None:
    first = client.submit(flows.diabetes, {"n_alphas": 3}, seed=5).wait(timeout=180)
    second = client.submit(flows.diabetes, {"n_alphas": 3}, seed=5).wait(timeout=180)
    assert first.status is RunStatus.OK and second.status is RunStatus.OK
    assert {n.status.value for n in second.nodes} == {"cached"}
    assert client.metrics(second.id) == client.metrics(first.id)
    check_the_example_run(client, second, 3, cached=True)


def test_xgboost_and_lightgbm_models_cross_nodes_and_predict_the_same(client: Client) -> None:
    record = client.submit(flows.boosters).wait(timeout=180)
    assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    check_boosters(client, record)


def check_boosters(client: Client, record: RunRecord) -> None:
    """What the using node said of the models it received is what the models read here say, and what models
    fit here say: the same class, predictions, probabilities and classes."""
    said = record.result["said"]
    assert said["types"] == ["XGBRegressor", "LGBMClassifier"]
    regressor, classifier = client.output(record.id, "regressor"), client.output(record.id, "classifier")
    X_diabetes, (X_iris, _) = load_diabetes(return_X_y=True)[0], flows.iris()
    for model, fit_here in ((regressor, flows.fit_xgboost()), (classifier, flows.fit_lightgbm())):
        assert type(model) is type(fit_here)
        X = X_diabetes if model is regressor else X_iris
        np.testing.assert_array_equal(model.predict(X), fit_here.predict(X))
    np.testing.assert_array_equal(np.asarray(said["regression"], dtype=np.float32), regressor.predict(X_diabetes))
    assert said["species"] == classifier.predict(X_iris).tolist() and said["classes"] == classifier.classes_.tolist()
    np.testing.assert_array_equal(np.asarray(said["probabilities"]), classifier.predict_proba(X_iris))
    codecs = {a.message: a.codec for a in client.artifacts(record.id)}
    assert codecs == {"regressor": "xgboost.regressor", "classifier": "lightgbm.classifier"}


def test_a_type_skops_does_not_trust_fails_the_node_naming_it_until_the_settings_list_it(settings: Settings) -> None:
    with connect(settings) as client:
        refused = client.submit(flows.clipped, {"transformer": "clip"}).wait(timeout=120)
    assert refused.status is RunStatus.ERROR
    error = node_of(refused, "fit_clipped").error
    assert error.startswith(f"message 'model' of node 'fit_clipped' is a sklearn.pipeline.Pipeline that holds types "
                            f"skops does not trust: {CLIP}; if you trust that code, list them in "
                            "FLUKSIO_TRUSTED_TYPES"), error
    assert node_of(refused, "use_clipped").status.value == "skipped"
    with connect(settings.model_copy(update={"trusted_types": [CLIP]})) as trusting:
        record = trusting.submit(flows.clipped, {"transformer": "clip"}).wait(timeout=120)
        assert record.status is RunStatus.OK, [n.error for n in record.nodes]
        assert type(trusting.output(record.id, "model").steps[0][1]) is flows.Clip
        X = load_diabetes(return_X_y=True)[0]
        assert record.result["predicted"] == flows.clipped_pipeline("clip").predict(X).tolist()
        # Listing one type trusts that one only.
        other = trusting.submit(flows.clipped, {"transformer": "unlisted"}).wait(timeout=120)
        assert other.status is RunStatus.ERROR
        assert f"skops does not trust: {UNLISTED};" in node_of(other, "fit_clipped").error


def test_metrics_need_no_declaration(client: Client) -> None:
    record = client.submit(flows.metrics).wait(timeout=60)
    assert record.status is RunStatus.OK, [n.error for n in record.nodes]
    assert client.metrics(record.id) == {"accuracy": [(0, 0.5), (1, 0.6), (2, 0.7)]}


@pytest.mark.parametrize("bad, said", [
    ("nan", "MetricRefused: emit('accuracy', nan): a metric is a finite number, got nan (not finite)"),
    ("str", "MetricRefused: emit('accuracy', 'high'): a metric is a finite number, got a str"),
])
def test_a_value_that_is_no_metric_is_reported_at_the_node_s_own_line(client: Client, bad: str, said: str) -> None:
    record = client.submit(flows.metrics, {"bad": bad}).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    failed = node_of(record, "measure")
    lines, first = inspect.getsourcelines(flows.measure)
    line = first + next(i for i, text in enumerate(lines) if "refused here" in text)
    assert failed.error.startswith(said), failed.error
    assert failed.error.endswith(f"(at {flows.__file__}:{line} in measure)"), failed.error
    assert "fluksio/execution/emitter.py" not in (failed.logs or "")
    # The points emitted before it are kept.
    assert client.metrics(record.id) == {"accuracy": [(0, 0.5), (1, 0.6), (2, 0.7)]}


def test_the_example_runs_from_the_command_line_and_show_names_the_codec_and_the_metrics(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env["COLUMNS"] = "200"

    def fluksio(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "fluksio.cli.main", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=180)

    done = fluksio("run", f"{REPO / 'examples' / 'sklearn_flow.py'}:flow", "-p", "n_alphas=3", "--seed", "1",
                   "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["status"] == "ok" and record["result"]["best"]["$artifact"]["codec"] == "sklearn"
    shown = fluksio("show", record["id"])
    assert shown.returncode == 0, shown.stderr
    assert "sklearn best.skops" in shown.stdout  # the result names the codec of the stored model
    for name in ("train_r2[0]", "train_r2[2]", "test_r2"):
        assert name in shown.stdout, shown.stdout
