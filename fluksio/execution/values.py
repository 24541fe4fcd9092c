"""Values crossing a node boundary: JSON, with artifacts and codec values as references. Never pickle.

Out of a node (:func:`encode`): JSON values pass as they are (an enum member that
is a ``str`` or ``int`` as its plain value); a pydantic model as its JSON dump; a
dataclass field by field; a ``date``, ``datetime``, ``UUID``, ``Decimal``,
``Enum`` or ``Path`` as pydantic writes it in JSON; a set as a sorted list; an
:class:`Artifact` stored and referenced; a value of a codec's type (a numpy array,
a pandas frame, bytes, a user's type) encoded once, straight into the artifact
store, and referenced with the codec's name. Anything else fails the node,
naming the value.

Into a node (:func:`receive`): references become :class:`Artifact` objects, or,
when they name a codec, the codec's value; then an annotated parameter's value
is validated into its annotation (see flows/annotations.py).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import date, time, timedelta
from decimal import Decimal
from enum import Enum
from pathlib import PurePath
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from fluksio.artifacts.artifact import Artifact, is_ref
from fluksio.artifacts.store import ArtifactStore
from fluksio.codecs import REGISTRY, Codec, codec_of, load_value, store_value
from fluksio.errors import ArtifactError, CodecError, NodeFailed
from fluksio.flows.annotations import fit_error, type_name
from fluksio.flows.node import NodeSpec

#: Values pydantic writes as JSON strings (or numbers) and an annotation reads back.
JSON_LEAVES = (date, time, timedelta, UUID, Decimal, Enum)


def encode(value: Any, store: ArtifactStore, made: list[Artifact], where: str, name: str = "value") -> Any:
    """JSON-ready copy of ``value``; artifacts and codec values are stored, replaced by references, and
    appended to ``made``. ``where`` names the value in errors; ``name`` names the files codecs write."""
    if isinstance(value, str):
        if "\x00" in value:
            raise NodeFailed(f"{where} contains a NUL character, which the run store cannot keep")
        return value if type(value) is str else str.__str__(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if type(value) is int else int(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise NodeFailed(f"{where} is {value!r}, which JSON cannot carry")
        return value if type(value) is float else float(value)
    if isinstance(value, Artifact):
        stored = store.put(value)
        made.append(stored)
        return stored.to_ref()
    if isinstance(value, (list, tuple)):
        return [encode(item, store, made, f"{where}[{i}]", name) for i, item in enumerate(value)]
    if isinstance(value, dict):
        encoded = {}
        for key, item in value.items():
            if not isinstance(key, str) or "\x00" in key:
                raise NodeFailed(f"{where} has a key {key!r} of type {type(key).__name__}; JSON keys are strings")
            encoded[str.__str__(key)] = encode(item, store, made, f"{where}[{key!r}]", name)
        return encoded
    codec = REGISTRY.for_type(type(value))
    if codec is not None:
        return _encode_with(codec, value, store, made, where, name)
    return _encode_structured(value, store, made, where, name)


def _encode_with(codec: Codec, value: Any, store: ArtifactStore, made: list[Artifact], where: str,
                 name: str) -> dict[str, Any]:
    try:
        artifact, ref = store_value(value, codec, store, name)
    except CodecError as exc:
        raise NodeFailed(f"{where} {exc}") from None
    made.append(artifact)
    return ref


def _encode_structured(value: Any, store: ArtifactStore, made: list[Artifact], where: str, name: str) -> Any:
    """Models, dataclasses, sets and the values pydantic writes as JSON; else the node fails."""
    if isinstance(value, BaseModel):
        try:
            dumped = value.model_dump(mode="json")
        except PydanticSerializationError:  # it holds values JSON cannot (arrays …): each is encoded in turn
            dumped = value.model_dump(mode="python")
        return encode(dumped, store, made, where, name)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name), store, made, f"{where}.{f.name}", name)
                for f in dataclasses.fields(value)}
    if isinstance(value, (set, frozenset)):
        items = [encode(item, store, made, f"{where} element", name) for item in value]
        try:
            return sorted(items)  # a set's order differs between processes; its JSON (and cache key) must not
        except TypeError:
            return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, JSON_LEAVES):
        return encode(to_jsonable_python(value), store, made, where, name)
    if isinstance(value, PurePath):
        return str(value)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):  # np.int64(3): a number, not an array
        return encode(value.item(), store, made, where, name)
    raise NodeFailed(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which cannot cross a node boundary; "
        "return JSON values (numbers, strings, lists, dicts), a pydantic model, a dataclass, an Artifact, or a "
        f"value of a codec's type ({', '.join(REGISTRY.names())}; add one with fluksio.codecs.register)"
    )


def decode(value: Any, store: ArtifactStore, where: str = "a value", codecs: bool = True) -> Any:
    """Inputs as the node sees them: references become :class:`Artifact` objects bound to the store, or, when
    they name a codec (and ``codecs``), the value the codec reads from the artifact."""
    if is_ref(value):
        if not codecs or codec_of(value) is None:
            return Artifact.from_ref(value, store)
        try:
            return load_value(value, store)
        except (CodecError, ArtifactError) as exc:
            raise NodeFailed(f"{where}: {exc}") from None
    if isinstance(value, list):
        return [decode(item, store, f"{where}[{i}]", codecs) for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: decode(item, store, f"{where}[{key!r}]", codecs) for key, item in value.items()}
    return value


def receive(node: NodeSpec, param: str, message: str, value: Any, store: ArtifactStore) -> Any:
    """What ``param`` of ``node`` receives of ``message``: decoded, then validated into the parameter's
    annotation (a parameter annotated ``Artifact`` gets the stored file, even of a codec's value)."""
    where = f"message {message!r} for parameter {param!r} of node {node.name!r}"
    if node.types.get(param) is Artifact:
        return decode(value, store, where, codecs=False)
    decoded = decode(value, store, where)
    adapter = node.adapters.get(param)
    if adapter is None:
        return decoded
    try:
        return adapter.validate_python(decoded)
    except ValidationError as exc:
        raise NodeFailed(f"{where} must be {type_name(node.types[param])}: {fit_error(exc)}") from None
