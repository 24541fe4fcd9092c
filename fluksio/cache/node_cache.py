"""A driver's use of the run cache: the key of each node's call, what an earlier call left under it, and why
a call found nothing there (which ``fluksio show`` says)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fluksio.artifacts.store import ArtifactStore
from fluksio.cache.keys import MAX_CACHED_OUTPUT_BYTES, cache_key
from fluksio.cache.lookup import UNREADABLE, CacheHit, find
from fluksio.flows.flow import Flow
from fluksio.flows.node_code import node_codes
from fluksio.schemas import split_unit
from fluksio.store.db import Database
from fluksio.store.nodes import last_call

log = logging.getLogger(__name__)

#: Why a call was not restored from the cache, when the reason is the run's or the node's own.
NO_CACHE = "the run was submitted with no_cache"
NOT_CACHED = "the node is declared cache=False"
NO_KEY = "its inputs cannot key the cache"


class NodeCache:
    """Cache keys of one run's units (each worked out once), lookups under them, and why a lookup missed.

    ``inputs_of(unit)`` gives a unit's input values once they are all there; a key is only asked for then.
    An element's key holds its own values and the inputs broadcast to every element, not its index: a
    rerun with one more shard finds every other shard's entry. A node's key holds its own code identity
    (flows/node_code.py: its function and what it uses of the project), or, where that cannot be worked
    out, the run's whole ``code_digest``.
    """

    def __init__(self, db: Database, artifacts: ArtifactStore, flow: Flow, code_digest: str | None,
                 use_cache: bool, inputs_of: Callable[[str], dict[str, Any]], run_id: str = "") -> None:
        self.db = db
        self.artifacts = artifacts
        self.flow = flow
        self.code_digest = code_digest
        #: ``False`` for a run submitted with ``no_cache``: nothing is looked up (rows still record keys).
        self.use_cache = use_cache
        self.run_id = run_id
        self._inputs_of = inputs_of
        self._keys: dict[str, str | None] = {}
        self._codes: dict[str, str] | None = None
        #: Why a unit found no entry, until its row takes it (see :meth:`why`).
        self._misses: dict[str, str] = {}
        #: Per node: why its units that find no entry under their key find none (one look at the history each).
        self._news: dict[str, str] = {}

    def code(self, node: str) -> str | None:
        """The code identity a node's calls are keyed on: its own, else the run's whole code digest."""
        if self._codes is None:
            self._codes = node_codes(self.flow)
        return self._codes.get(node, self.code_digest)

    def key(self, unit: str) -> str | None:
        """The unit's cache key; ``None`` for a node declared ``cache=False``."""
        if unit not in self._keys:
            node = split_unit(unit)[0]
            spec = self.flow.nodes[node]
            try:
                self._keys[unit] = (cache_key(self.flow.name, spec, self.code(node), self._inputs_of(unit))
                                    if spec.cache else None)
            except (TypeError, ValueError):  # inputs JSON cannot key (it never should): just not cached
                self._keys[unit] = None
        return self._keys[unit]

    def hit(self, unit: str) -> tuple[str, CacheHit] | None:
        """``(key, hit)`` when an earlier call of this unit with these inputs left usable outputs; else
        ``None``, and :meth:`why` says why not."""
        if not self.use_cache:
            self._misses[unit] = NO_CACHE
            return None
        key = self.key(unit)
        if key is None:
            self._misses[unit] = NOT_CACHED if not self.flow.nodes[split_unit(unit)[0]].cache else NO_KEY
            return None
        found = find(self.db, self.artifacts, key)
        if isinstance(found, CacheHit):
            return key, found
        self._misses[unit] = found or self._nothing_under_key(split_unit(unit)[0])
        return None

    def why(self, unit: str) -> str | None:
        """Why the unit's call was not restored from the cache (``None``: it was not looked up: a retry, a
        resumed run's unit that ran before); asked once, when its row is written."""
        return self._misses.pop(unit, None)

    def _nothing_under_key(self, node: str) -> str:
        """Why no entry is under a key of ``node``: told by its newest earlier successful call, if any."""
        if node not in self._news:
            own = node in (self._codes or {})
            try:
                last = last_call(self.db, self.flow.name, node, self.run_id)
            except Exception:  # only a word for a row: never worth failing the run over
                log.warning("run %s: cannot read the earlier calls of %s", self.run_id, node, exc_info=True)
                return UNREADABLE
            if last is None:
                self._news[node] = f"no earlier call of `{node}` succeeded"
            elif last[0] is None:
                self._news[node] = f"no earlier call of `{node}` recorded its code"
            elif last[0] != self.code(node):
                self._news[node] = (f"code of `{node}` changed" if own
                                    else f"the code of flow {self.flow.name!r} changed")
            elif not last[1]:
                self._news[node] = (f"its earlier outputs were too large to cache (over "
                                    f"{MAX_CACHED_OUTPUT_BYTES // 1024} kB as JSON)")
            else:
                self._news[node] = "inputs changed"
        return self._news[node]
