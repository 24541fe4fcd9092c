"""Values crossing a node boundary: JSON, with artifacts as references. Anything else fails the node."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from fluksio.artifacts.artifact import Artifact, is_ref
from fluksio.artifacts.store import ArtifactStore
from fluksio.errors import NodeFailed


def encode(value: Any, store: ArtifactStore, made: list[Artifact], where: str) -> Any:
    """JSON-ready copy of ``value``; artifacts are stored and replaced by references (appended to ``made``)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise NodeFailed(f"{where} contains a NUL character, which the run store cannot keep")
        return value
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise NodeFailed(f"{where} is {value!r}, which JSON cannot carry")
        return value
    if isinstance(value, Artifact):
        stored = store.put(value)
        made.append(stored)
        return stored.to_ref()
    if isinstance(value, (list, tuple)):
        return [encode(item, store, made, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        encoded = {}
        for key, item in value.items():
            if not isinstance(key, str) or "\x00" in key:
                raise NodeFailed(f"{where} has a key {key!r} of type {type(key).__name__}; JSON keys are strings")
            encoded[key] = encode(item, store, made, f"{where}[{key!r}]")
        return encoded
    if isinstance(value, BaseModel):
        return encode(value.model_dump(mode="json"), store, made, where)
    raise NodeFailed(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which cannot cross a node boundary; "
        "return JSON values (numbers, strings, lists, dicts), a pydantic model, or an Artifact"
    )


def decode(value: Any, store: ArtifactStore) -> Any:
    """Inputs as the node sees them: references become :class:`Artifact` objects bound to the store."""
    if is_ref(value):
        return Artifact.from_ref(value, store)
    if isinstance(value, list):
        return [decode(item, store) for item in value]
    if isinstance(value, dict):
        return {key: decode(item, store) for key, item in value.items()}
    return value
