"""scikit-learn estimators and pipelines between nodes, through skops: never pickle, and only trusted types.

skops writes a fitted estimator (a pipeline, a grid search …) as a zip of JSON and arrays, and makes it
again building only types it is told to trust: those skops itself trusts (scikit-learn's estimators,
numpy, scipy and builtins it knows) and those ``FLUKSIO_TRUSTED_TYPES`` adds. Making an object of any
other type on load — a transformer class of your own, a function — is running code the bytes chose, which
is what pickle does; so a model that holds one is refused by the types' names, both by the node that
stores it and by every process that reads it, until they are listed.

The list is the process's: a :class:`~fluksio.runtime.Runtime` sets it from its settings when it is built
(:func:`trust`), because a codec reads a file with nothing but its path.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from fluksio.codecs.builtin import need
from fluksio.codecs.registry import Codec
from fluksio.errors import CodecError

#: What ``pip install`` brings scikit-learn and skops.
SKLEARN_EXTRA = "fluksio[sklearn]"
#: The setting that lists the types a stored model may hold besides those skops trusts.
TRUSTED_SETTING = "FLUKSIO_TRUSTED_TYPES"

#: Types trusted here besides skops' own (``module.Class``, as skops names them); see :func:`trust`.
_trusted: frozenset[str] = frozenset()


def trust(types: Iterable[str]) -> None:
    """Trust ``types`` (``"mypackage.transforms.Clip"``) besides skops' own, in this process, instead of what
    was trusted before. Called with ``settings.trusted_types`` whenever a runtime is built."""
    global _trusted
    _trusted = frozenset(types)


def trusted() -> frozenset[str]:
    """The types this process trusts besides skops' own."""
    return _trusted


def _refused(skops_io: Any, data: bytes) -> tuple[list[str], list[str]]:
    """The types in ``data`` skops does not trust, and those of them this process does not trust either."""
    untrusted = list(skops_io.get_untrusted_types(data=data))
    return untrusted, sorted(set(untrusted) - _trusted)


def write_estimator(value: Any, file: BinaryIO) -> None:
    skops_io = need("skops.io", "a scikit-learn estimator (skops)", SKLEARN_EXTRA)
    data = skops_io.dumps(value)
    _, refused = _refused(skops_io, data)
    if refused:
        raise CodecError(f"is a {type(value).__module__}.{type(value).__qualname__} that holds types skops does not "
                         f"trust: {', '.join(refused)}; if you trust that code, list them in {TRUSTED_SETTING} "
                         "(comma-separated) on every machine that runs or reads this flow")
    file.write(data)


def read_estimator(path: Path) -> Any:
    skops_io = need("skops.io", "reading a scikit-learn estimator (skops)", SKLEARN_EXTRA)
    data = path.read_bytes()
    untrusted, refused = _refused(skops_io, data)
    if refused:
        raise CodecError(f"the stored scikit-learn model holds types skops does not trust: {', '.join(refused)}; "
                         f"if you trust that code, list them in {TRUSTED_SETTING} (comma-separated) on this machine")
    return skops_io.loads(data, trusted=untrusted)  # every one of them is in this process's list


ESTIMATOR_CODECS = (
    # Any estimator, a Pipeline included; the boosters' wrappers have codecs of their own (codecs/boosters.py),
    # found first because a value's codec is that of its nearest class.
    Codec("sklearn", "sklearn.base:BaseEstimator", write_estimator, read_estimator, media_type="application/zip",
          suffix=".skops", extra=SKLEARN_EXTRA),
)
