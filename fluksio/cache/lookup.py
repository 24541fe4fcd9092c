"""The run cache's lookup: earlier successful node calls, found by their key (see ``cache_key``).

The cache is the run history itself: a node row that ended ``ok`` with small
outputs is an entry. Its key covers the node's identity and declared ports,
the code identity of the node (flows/node_code.py), and its input values as canonical JSON.
An entry whose artifacts are gone is a miss; so is any lookup that fails.
"""

from __future__ import annotations

import logging

from fluksio.artifacts.artifact import find_refs
from fluksio.artifacts.store import ArtifactStore
from fluksio.cache.keys import CacheHit
from fluksio.store.db import Database
from fluksio.store.nodes import cache_entries

log = logging.getLogger(__name__)

#: Entries looked at per lookup, newest first: past the first whose artifacts are all there, none is read.
ENTRIES_LOOKED_AT = 20
#: Why entries under a key were no use: what ``fluksio show`` says of the call that ran instead.
GONE = "the outputs cached under its key are gone from the artifact store"
UNREADABLE = "the run cache could not be read (the driver's log says why)"


def lookup(db: Database, artifacts: ArtifactStore, key: str) -> CacheHit | None:
    """The newest usable entry for ``key``; ``None`` on a miss, also when the lookup itself fails."""
    found = find(db, artifacts, key)
    return found if isinstance(found, CacheHit) else None


def find(db: Database, artifacts: ArtifactStore, key: str) -> CacheHit | str | None:
    """The newest usable entry for ``key``; else why the entries under it are no use (:data:`GONE`,
    :data:`UNREADABLE`), or ``None`` when there are none."""
    try:
        entries = cache_entries(db, key, ENTRIES_LOOKED_AT)
        for run_id, element, outputs in entries:
            if outputs is None:
                continue
            if all(artifacts.exists(ref["$artifact"]["digest"]) for ref in find_refs(outputs)):
                return CacheHit(run_id, outputs, element)
        return GONE if entries else None
    except Exception:
        log.warning("cache lookup for %s failed; running the node instead", key, exc_info=True)
        return UNREADABLE
