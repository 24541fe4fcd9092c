"""A codec value's cache identity is its digest: keys are made from references, never by encoding again."""

from __future__ import annotations

import numpy as np

from fluksio import Flow
from fluksio.artifacts import MemoryArtifactStore
from fluksio.cache.keys import cache_key
from fluksio.execution.values import encode

flow = Flow("keys")


@flow.node(provides="total")
def total(values: np.ndarray) -> float:
    return float(values.sum())


def key_of(array: np.ndarray, store: MemoryArtifactStore) -> str:
    ref = encode(array, store, [], "message 'values' of node 'make'", "values")
    return cache_key("keys", flow.nodes["total"], "sha256:code", {"values": ref})


def test_equal_arrays_give_one_key_and_different_arrays_another():
    store = MemoryArtifactStore()
    first, second = key_of(np.arange(100.0), store), key_of(np.arange(100.0), store)
    changed = key_of(np.arange(100.0) + 1e-9, store)
    assert first == second and changed != first
    # The key is made from the reference alone: with the bytes gone from the store it is still the same key.
    ref = encode(np.arange(100.0), store, [], "w", "values")
    store.delete(ref["$artifact"]["digest"])
    assert cache_key("keys", flow.nodes["total"], "sha256:code", {"values": ref}) == first
