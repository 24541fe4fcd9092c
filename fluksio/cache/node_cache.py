"""A driver's use of the run cache: the key of each node's call, and what an earlier call left under it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fluksio.artifacts.store import ArtifactStore
from fluksio.cache.keys import cache_key
from fluksio.cache.lookup import CacheHit, lookup
from fluksio.flows.flow import Flow
from fluksio.schemas import split_unit
from fluksio.store.db import Database


class NodeCache:
    """Cache keys of one run's units (each worked out once), and lookups under them.

    ``inputs_of(unit)`` gives a unit's input values once they are all there; a key is only asked for then.
    An element's key holds its own values and the inputs broadcast to every element, not its index: a
    rerun with one more shard finds every other shard's entry.
    """

    def __init__(self, db: Database, artifacts: ArtifactStore, flow: Flow, code_digest: str | None,
                 use_cache: bool, inputs_of: Callable[[str], dict[str, Any]]) -> None:
        self.db = db
        self.artifacts = artifacts
        self.flow = flow
        self.code_digest = code_digest
        #: ``False`` for a run submitted with ``no_cache``: nothing is looked up (rows still record keys).
        self.use_cache = use_cache
        self._inputs_of = inputs_of
        self._keys: dict[str, str | None] = {}

    def key(self, unit: str) -> str | None:
        """The unit's cache key; ``None`` for a node declared ``cache=False``."""
        if unit not in self._keys:
            spec = self.flow.nodes[split_unit(unit)[0]]
            try:
                self._keys[unit] = (cache_key(self.flow.name, spec, self.code_digest, self._inputs_of(unit))
                                    if spec.cache else None)
            except (TypeError, ValueError):  # inputs JSON cannot key (it never should): just not cached
                self._keys[unit] = None
        return self._keys[unit]

    def hit(self, unit: str) -> tuple[str, CacheHit] | None:
        """``(key, hit)`` when an earlier call of this unit with these inputs left usable outputs."""
        if not self.use_cache:
            return None
        key = self.key(unit)
        if key is None:
            return None
        found = lookup(self.db, self.artifacts, key)
        return None if found is None else (key, found)
