"""XGBoost and LightGBM models between nodes, in the libraries' own formats: never pickle.

* An XGBoost ``Booster``, and each of its scikit-learn wrappers (``XGBRegressor`` …), as the model file
  XGBoost itself writes (UBJSON): ``XGBRegressor().load_model(path)`` reads the artifact outside fluksio
  too. As with XGBoost's own ``save_model``, what comes back predicts the same, with the training
  parameters the model file holds.
* A LightGBM ``Booster`` as its model text (``model_to_string``, what ``lgb.Booster(model_file=…)``
  reads). LightGBM has no format for its wrappers (``LGBMClassifier`` …), so one is a JSON document: the
  model text, the wrapper's parameters, and what its ``fit`` learnt besides the trees (the classes, the
  objective, the best iteration and scores), from which it is made again as ``fit`` left it.

Each wrapper class has a codec of its own (``xgboost.regressor``, ``lightgbm.classifier`` …), so the class
that comes back is the one that was stored; a subclass of one is refused rather than made into its base.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO

from fluksio.codecs.builtin import need
from fluksio.codecs.registry import Codec
from fluksio.errors import CodecError

#: What ``pip install`` brings XGBoost (the CPU wheel: XGBoost's own pulls NCCL, a GPU library, in).
XGBOOST_EXTRA = "fluksio[xgboost]"
#: What ``pip install`` brings LightGBM.
LIGHTGBM_EXTRA = "fluksio[lightgbm]"
#: The ``format`` a LightGBM wrapper's JSON document declares, and the one this fluksio reads.
LIGHTGBM_FORMAT = "fluksio.lightgbm.sklearn/1"

#: Each scikit-learn wrapper, by its codec's name: (module, class).
XGBOOST_WRAPPERS = {
    "xgboost.classifier": ("xgboost.sklearn", "XGBClassifier"),
    "xgboost.regressor": ("xgboost.sklearn", "XGBRegressor"),
    "xgboost.ranker": ("xgboost.sklearn", "XGBRanker"),
    "xgboost.rf_classifier": ("xgboost.sklearn", "XGBRFClassifier"),
    "xgboost.rf_regressor": ("xgboost.sklearn", "XGBRFRegressor"),
}
LIGHTGBM_WRAPPERS = {
    "lightgbm.classifier": ("lightgbm.sklearn", "LGBMClassifier"),
    "lightgbm.regressor": ("lightgbm.sklearn", "LGBMRegressor"),
    "lightgbm.ranker": ("lightgbm.sklearn", "LGBMRanker"),
}


def _type_path(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _exactly(value: Any, module: str, name: str, extra: str) -> None:
    """Refuse a subclass of the wrapper ``module.name`` (it would come back as the wrapper), and an unfitted one."""
    wrapper = getattr(need(module, f"a {module.split('.')[0]} model", extra), name)
    if type(value) is not wrapper:
        raise CodecError(f"is a {_type_path(value)}, a subclass of {module}.{name}; it would come back as a plain "
                         f"{name}: register a codec for it, or return the {name} itself")
    if not value.__sklearn_is_fitted__():
        raise CodecError(f"is an unfitted {name}; fit it first, or pass its parameters (model.get_params()) "
                         "as JSON")


# -- XGBoost -----------------------------------------------------------------------------------------


def write_xgboost_booster(value: Any, file: BinaryIO) -> None:
    file.write(value.save_raw(raw_format="ubj"))


def read_xgboost_booster(path: Path) -> Any:
    xgboost = need("xgboost", "reading an XGBoost model", XGBOOST_EXTRA)
    return xgboost.Booster(model_file=bytearray(path.read_bytes()))


def _xgboost_wrapper(codec: str) -> Codec:
    module, name = XGBOOST_WRAPPERS[codec]

    def write(value: Any, file: BinaryIO) -> None:
        _exactly(value, module, name, XGBOOST_EXTRA)
        file.write(value.get_booster().save_raw(raw_format="ubj"))

    def read(path: Path) -> Any:
        model = getattr(need(module, f"reading an XGBoost {name}", XGBOOST_EXTRA), name)()
        model.load_model(bytearray(path.read_bytes()))
        return model

    return Codec(codec, f"{module}:{name}", write, read, media_type="application/ubjson", suffix=".ubj",
                 extra=XGBOOST_EXTRA)


# -- LightGBM ----------------------------------------------------------------------------------------


def write_lightgbm_booster(value: Any, file: BinaryIO) -> None:
    # Up to the best iteration when training found one: what predict uses by default, here and there alike.
    file.write(value.model_to_string().encode())


def read_lightgbm_booster(path: Path) -> Any:
    lightgbm = need("lightgbm", "reading a LightGBM model", LIGHTGBM_EXTRA)
    return lightgbm.Booster(model_str=path.read_text())


def _plain(value: Any, what: str) -> Any:
    """``value`` as JSON gives it back (numpy numbers as numbers), or :class:`CodecError` naming ``what``."""
    try:
        text = json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else repr(v))
    except (TypeError, ValueError) as exc:
        raise CodecError(f"has {what} that JSON cannot hold ({exc})") from None
    if json.loads(text) != value:
        raise CodecError(f"has {what} that JSON cannot hold exactly ({value!r:.200}); give it as numbers, strings, "
                         "lists and dicts with string keys")
    return json.loads(text)


def _lightgbm_document(value: Any) -> dict[str, Any]:
    """What a fitted LightGBM wrapper is made again from (see the module's docstring)."""
    params = value.get_params(deep=False)
    if callable(params.get("objective")) or callable(value._objective):
        raise CodecError(f"is a {type(value).__name__} with a custom objective function, which cannot be stored "
                         "without pickle; return model.booster_ (its trees) instead")
    document: dict[str, Any] = {
        "format": LIGHTGBM_FORMAT,
        "params": {key: _plain(item, f"the parameter {key}={item!r:.80}") for key, item in params.items()},
        "objective": value._objective,
        "best_iteration": int(value._best_iteration),
        "best_score": _plain({k: dict(v) for k, v in value._best_score.items()}, "best scores"),
        "evals_result": _plain(value._evals_result, "evaluation results"),
        "fitted_with_feature_names": bool(value._fitted_with_feature_names),
        "n_features_in": int(value._n_features_in),
        "model": value._Booster.model_to_string(),
    }
    if getattr(value, "_classes", None) is not None:
        document["classes"] = _plain(value._classes.tolist(), "class labels")
        document["classes_dtype"] = value._classes.dtype.str
    return document


def _lightgbm_model(cls: type, document: dict[str, Any]) -> Any:
    """The wrapper ``cls`` as its ``fit`` left it: the attributes ``fit`` sets, which predicting reads."""
    lightgbm = need("lightgbm", "reading a LightGBM model", LIGHTGBM_EXTRA)
    model = cls(**document["params"])
    model._Booster = lightgbm.Booster(model_str=document["model"])
    model._n_features = model._Booster.num_feature()
    model._n_features_in = document["n_features_in"]
    model._objective = document["objective"]
    model._best_iteration = document["best_iteration"]
    model._best_score = document["best_score"]
    model._evals_result = document["evals_result"]
    model._fitted_with_feature_names = document["fitted_with_feature_names"]
    if "classes" in document:
        np = need("numpy", "reading a LightGBM classifier", LIGHTGBM_EXTRA)
        preprocessing = need("sklearn.preprocessing", "reading a LightGBM classifier", LIGHTGBM_EXTRA)
        encoder = preprocessing.LabelEncoder().fit(np.asarray(document["classes"], dtype=document["classes_dtype"]))
        model._le, model._classes, model._n_classes = encoder, encoder.classes_, len(encoder.classes_)
        model._class_map = dict(zip(encoder.classes_, encoder.transform(encoder.classes_), strict=True))
    model.fitted_ = True
    return model


def _lightgbm_wrapper(codec: str) -> Codec:
    module, name = LIGHTGBM_WRAPPERS[codec]

    def write(value: Any, file: BinaryIO) -> None:
        _exactly(value, module, name, LIGHTGBM_EXTRA)
        file.write(json.dumps(_lightgbm_document(value)).encode())

    def read(path: Path) -> Any:
        document = json.loads(path.read_bytes())
        if not isinstance(document, dict) or document.get("format") != LIGHTGBM_FORMAT:
            found = document.get("format") if isinstance(document, dict) else type(document).__name__
            raise CodecError(f"the stored LightGBM {name} is in format {found!r}, not {LIGHTGBM_FORMAT!r}: "
                             "upgrade fluksio on this machine")
        return _lightgbm_model(getattr(need(module, f"reading a LightGBM {name}", LIGHTGBM_EXTRA), name), document)

    return Codec(codec, f"{module}:{name}", write, read, media_type="application/json", suffix=".json",
                 extra=LIGHTGBM_EXTRA)


BOOSTER_CODECS = (
    Codec("xgboost", "xgboost.core:Booster", write_xgboost_booster, read_xgboost_booster,
          media_type="application/ubjson", suffix=".ubj", extra=XGBOOST_EXTRA),
    *(_xgboost_wrapper(codec) for codec in XGBOOST_WRAPPERS),
    Codec("lightgbm", "lightgbm.basic:Booster", write_lightgbm_booster, read_lightgbm_booster,
          media_type="text/plain", suffix=".txt", extra=LIGHTGBM_EXTRA),
    *(_lightgbm_wrapper(codec) for codec in LIGHTGBM_WRAPPERS),
)
