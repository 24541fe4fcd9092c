"""Codecs: values of data types (arrays, frames, tensors …) between nodes as artifacts, never pickle.

::

    import fluksio.codecs

    fluksio.codecs.register(MyType, "mytype", encode=lambda v: v.to_bytes(), decode=MyType.from_bytes)

A node that returns a value of a codec's type has it stored as a content-addressed
artifact automatically; the next node, on any machine with the same codec, receives
the same type. Built in: ``numpy`` (``numpy.ndarray`` as ``.npy``), ``pandas``
(``pandas.DataFrame`` as Parquet), ``pandas.series`` (``pandas.Series`` as Parquet),
``bytes``, ``sklearn`` (scikit-learn estimators through skops, trusted types only), and XGBoost's and
LightGBM's models in their own formats (``xgboost``, ``lightgbm`` and one codec per scikit-learn wrapper:
``xgboost.regressor``, ``lightgbm.classifier`` …). Installed packages add codecs through the entry-point group
``fluksio.codecs`` (a :class:`Codec`, a list of them, or a function returning them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fluksio.codecs.boosters import BOOSTER_CODECS
from fluksio.codecs.builtin import BUILTIN_CODECS, DATA_EXTRA
from fluksio.codecs.estimators import ESTIMATOR_CODECS
from fluksio.codecs.registry import ENTRY_POINT_GROUP, REGISTRY, Codec, CodecRegistry, from_bytes_functions
from fluksio.codecs.stored import codec_of, codec_ref, load_value, store_value

__all__ = ["DATA_EXTRA", "ENTRY_POINT_GROUP", "REGISTRY", "Codec", "CodecRegistry", "codec_for", "codec_named",
           "codec_of", "codec_ref", "from_bytes_functions", "load_value", "register", "register_codec",
           "store_value"]

for _codec in (*BUILTIN_CODECS, *ESTIMATOR_CODECS, *BOOSTER_CODECS):
    REGISTRY.add(_codec)


def register(type_: type, name: str, encode: Callable[[Any], bytes], decode: Callable[[bytes], Any], *,
             media_type: str = "application/octet-stream", suffix: str = "") -> Codec:
    """Carry values of ``type_`` (and its subclasses) between nodes as ``encode(value)`` bytes, made back into
    a value with ``decode(data)``. ``name`` goes into every reference, so every process that reads the value
    must register the same name: do it in the flows module, which workers import (FLUKSIO_FLOWS)."""
    return REGISTRY.add(from_bytes_functions(type_, name, encode, decode, media_type=media_type, suffix=suffix))


def register_codec(codec: Codec) -> Codec:
    """Register a :class:`Codec` that writes to and reads from files itself (for values too large for bytes)."""
    return REGISTRY.add(codec)


def codec_for(value: Any) -> Codec | None:
    """The codec that carries ``value``, or ``None``."""
    return REGISTRY.for_type(type(value))


def codec_named(name: str) -> Codec:
    """The codec called ``name``; :class:`~fluksio.errors.CodecError` when this process has none."""
    return REGISTRY.named(name)
