"""The model codecs on a real folder store: scikit-learn estimators (skops), XGBoost and LightGBM models (their own
formats) come back as the same class and predict the same; a type skops does not trust is refused by name until
it is listed; what a format cannot hold is refused, saying what to do."""

from __future__ import annotations

import json

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.datasets import load_diabetes, load_iris
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fluksio.artifacts import LocalArtifactStore
from fluksio.codecs import codec_for, load_value, store_value
from fluksio.codecs.estimators import trust, trusted
from fluksio.errors import CodecError
from fluksio.settings import load_settings

DIABETES = load_diabetes(return_X_y=True)
IRIS = load_iris(return_X_y=True)
SPECIES = np.array(["setosa", "versicolor", "virginica"], dtype=object)[IRIS[1]]
#: Two of the three species, labelled by name: a binary classifier whose classes are strings.
TWO = IRIS[1] < 2


class Clip(TransformerMixin, BaseEstimator):
    """A transformer of the user's own: skops does not trust it."""

    def __init__(self, limit: float = 2.0) -> None:
        self.limit = limit

    def fit(self, X, y=None):  # noqa: ANN001, ANN201 - scikit-learn's signature
        return self

    def transform(self, X):  # noqa: ANN001, ANN201
        return np.clip(X, -self.limit, self.limit)


def type_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@pytest.fixture
def store(tmp_path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


@pytest.fixture(autouse=True)
def trust_nothing_more():
    """Each test starts (and leaves the process) trusting only what skops trusts."""
    trust([])
    yield
    trust([])


def round_trip(value, store):
    artifact, ref = store_value(value, codec_for(value), store, "model")
    return load_value(ref, store), artifact, ref


def fitted(name: str):
    X, y = DIABETES
    quiet = {"verbose": -1}
    return {
        "pipeline": lambda: make_pipeline(StandardScaler(), Ridge(alpha=0.5)).fit(X, y),
        "logistic": lambda: LogisticRegression(max_iter=500).fit(*IRIS),
        "xgboost.booster": lambda: xgb.train({"max_depth": 3}, xgb.DMatrix(X, y), num_boost_round=5),
        "xgboost.regressor": lambda: xgb.XGBRegressor(n_estimators=5, max_depth=3).fit(X, y),
        "xgboost.classifier": lambda: xgb.XGBClassifier(n_estimators=5).fit(*IRIS),
        "xgboost.rf_regressor": lambda: xgb.XGBRFRegressor(n_estimators=4).fit(X, y),
        "lightgbm.booster": lambda: lgb.train(quiet, lgb.Dataset(X, y), num_boost_round=5),
        "lightgbm.regressor": lambda: lgb.LGBMRegressor(n_estimators=5, **quiet).fit(X, y),
        "lightgbm.classifier": lambda: lgb.LGBMClassifier(n_estimators=5, **quiet).fit(IRIS[0], SPECIES),
        "lightgbm.binary": lambda: lgb.LGBMClassifier(n_estimators=5, **quiet).fit(IRIS[0][TWO], SPECIES[TWO]),
    }[name]()


def predictions(model) -> list[np.ndarray]:
    """What a model says of the data it was fit on: predictions, and class probabilities when it has them."""
    if isinstance(model, xgb.Booster):
        return [model.predict(xgb.DMatrix(DIABETES[0]))]
    X = IRIS[0] if (hasattr(model, "classes_") or getattr(model, "_estimator_type", "") == "classifier") \
        else DIABETES[0]
    said = [model.predict(X)]
    if hasattr(model, "predict_proba"):
        said.append(model.predict_proba(X))
    return said


@pytest.mark.parametrize("name, codec, media_type, suffix", [
    ("pipeline", "sklearn", "application/zip", ".skops"),
    ("logistic", "sklearn", "application/zip", ".skops"),
    ("xgboost.booster", "xgboost", "application/ubjson", ".ubj"),
    ("xgboost.regressor", "xgboost.regressor", "application/ubjson", ".ubj"),
    ("xgboost.classifier", "xgboost.classifier", "application/ubjson", ".ubj"),
    ("xgboost.rf_regressor", "xgboost.rf_regressor", "application/ubjson", ".ubj"),
    ("lightgbm.booster", "lightgbm", "text/plain", ".txt"),
    ("lightgbm.regressor", "lightgbm.regressor", "application/json", ".json"),
    ("lightgbm.classifier", "lightgbm.classifier", "application/json", ".json"),
    ("lightgbm.binary", "lightgbm.classifier", "application/json", ".json"),
])
def test_a_fitted_model_comes_back_as_the_same_class_and_predicts_the_same(name, codec, media_type, suffix, store):
    model = fitted(name)
    back, artifact, ref = round_trip(model, store)
    assert type(back) is type(model)
    assert ref["$artifact"]["codec"] == codec and ref["$artifact"]["media_type"] == media_type
    assert artifact.name == f"model{suffix}"
    for before, after in zip(predictions(model), predictions(back), strict=True):
        np.testing.assert_array_equal(after, before)
    if hasattr(model, "classes_"):
        np.testing.assert_array_equal(back.classes_, model.classes_)


def test_the_native_files_are_what_the_libraries_read_themselves(store, tmp_path):
    regressor, booster = fitted("xgboost.regressor"), fitted("lightgbm.booster")
    _, xgb_file, _ = round_trip(regressor, store)
    _, lgb_file, _ = round_trip(booster, store)
    as_named = tmp_path / xgb_file.name  # model.ubj: XGBoost tells its formats apart by the suffix
    as_named.write_bytes(store.path(xgb_file.digest).read_bytes())
    again = xgb.XGBRegressor()
    again.load_model(as_named)
    np.testing.assert_array_equal(again.predict(DIABETES[0]), regressor.predict(DIABETES[0]))
    text = lgb.Booster(model_file=store.path(lgb_file.digest))
    np.testing.assert_array_equal(text.predict(DIABETES[0]), booster.predict(DIABETES[0]))


@pytest.mark.filterwarnings("ignore:The argument 'eval_set' is deprecated")  # its successor is new in 4.7
def test_a_lightgbm_wrapper_keeps_its_parameters_and_what_fit_learnt(store):
    X, y = DIABETES
    model = lgb.LGBMRegressor(n_estimators=40, learning_rate=0.2, num_leaves=7, verbose=-1)
    model.fit(X[:300], y[:300], eval_set=[(X[300:], y[300:])], callbacks=[lgb.early_stopping(3, verbose=False)])
    back, _, _ = round_trip(model, store)
    assert back.get_params() == model.get_params()
    assert (back.best_iteration_, back.objective_, back.n_features_in_) == \
           (model.best_iteration_, model.objective_, model.n_features_in_)
    assert back.best_score_ == {k: dict(v) for k, v in model.best_score_.items()}
    np.testing.assert_array_equal(back.predict(X), model.predict(X))


def test_a_type_skops_does_not_trust_is_refused_by_name_until_listed(store):
    model = make_pipeline(Clip(), Ridge()).fit(*DIABETES)
    with pytest.raises(CodecError, match=rf"is a sklearn.pipeline.Pipeline that holds types skops does not trust: "
                                         rf"{type_path(Clip)}; if you trust that code, list them in "
                                         r"FLUKSIO_TRUSTED_TYPES"):
        round_trip(model, store)
    trust([type_path(Clip)])
    back, _, ref = round_trip(model, store)
    assert type(back.steps[0][1]) is Clip
    np.testing.assert_array_equal(back.predict(DIABETES[0]), model.predict(DIABETES[0]))
    # A process that does not trust it refuses to make it from the stored file too, naming it.
    trust([])
    with pytest.raises(CodecError, match=rf"the stored scikit-learn model holds types skops does not trust: "
                                         rf"{type_path(Clip)}; .* on this machine"):
        load_value(ref, store)


def test_the_trusted_types_setting_is_read_from_the_environment_and_checked(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLUKSIO_TRUSTED_TYPES", "mypackage.transforms.Clip, numpy.log1p")
    assert load_settings().trusted_types == ["mypackage.transforms.Clip", "numpy.log1p"]
    monkeypatch.setenv("FLUKSIO_TRUSTED_TYPES", "Clip")
    with pytest.raises(Exception, match=r"trusted type 'Clip' is not a dotted name; write it as skops names it"):
        load_settings()


def test_a_runtime_trusts_what_its_settings_list(tmp_path):
    from fluksio import Settings
    from fluksio.runtime import Runtime

    Runtime.standalone(Settings(database_url=f"sqlite:///{tmp_path / 'db'}", artifacts_dir=tmp_path / "a",
                                trusted_types=[type_path(Clip)]))
    assert trusted() == {type_path(Clip)}


def test_a_subclass_of_a_wrapper_is_refused_rather_than_coming_back_as_the_wrapper(store):
    class Mine(xgb.XGBRegressor):
        pass

    model = Mine(n_estimators=2).fit(*DIABETES)
    with pytest.raises(CodecError, match=r"a subclass of xgboost.sklearn.XGBRegressor; it would come back as a plain "
                                         r"XGBRegressor: register a codec for it"):
        round_trip(model, store)


@pytest.mark.parametrize("model, words", [
    (xgb.XGBClassifier(), "is an unfitted XGBClassifier; fit it first"),
    (lgb.LGBMRegressor(), "is an unfitted LGBMRegressor; fit it first"),
])
def test_an_unfitted_booster_wrapper_is_refused(model, words, store):
    with pytest.raises(CodecError, match=words):
        round_trip(model, store)


def test_a_lightgbm_wrapper_holding_what_json_cannot_is_refused_naming_it(store):
    X, y = DIABETES
    seeded = lgb.LGBMRegressor(n_estimators=2, random_state=np.random.RandomState(1), verbose=-1).fit(X, y)
    with pytest.raises(CodecError, match=r"has the parameter random_state=RandomState.* that JSON cannot hold"):
        round_trip(seeded, store)

    def squared(y_true, y_pred):  # noqa: ANN001, ANN202
        return y_pred - y_true, np.ones_like(y_pred)

    custom = lgb.LGBMRegressor(n_estimators=2, objective=squared, verbose=-1).fit(X, y)
    with pytest.raises(CodecError, match=r"custom objective function, which cannot be stored without pickle; "
                                         r"return model.booster_"):
        round_trip(custom, store)


def test_a_lightgbm_document_of_another_format_is_refused_saying_so(store):
    _, artifact, ref = round_trip(fitted("lightgbm.regressor"), store)
    path = store.path(artifact.digest)
    document = json.loads(path.read_bytes())
    document["format"] = "fluksio.lightgbm.sklearn/9"
    changed = store.put_stream(lambda file: file.write(json.dumps(document).encode()), name="m.json")
    ref["$artifact"]["digest"] = changed.digest
    with pytest.raises(CodecError, match=r"in format 'fluksio.lightgbm.sklearn/9', not 'fluksio.lightgbm.sklearn/1': "
                                         r"upgrade fluksio on this machine"):
        load_value(ref, store)
