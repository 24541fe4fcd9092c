"""Cache keys: what determines a node call's outputs, as a digest. Pure: no SQL, no Celery.

The key covers the node's identity and declared ports, the digest of the code
that ran it, and its input values as canonical JSON.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from fluksio.flows.node import NodeSpec

#: Outputs larger than this (as JSON) are not cache entries, in bytes.
MAX_CACHED_OUTPUT_BYTES = 256 * 1024


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def cache_key(flow: str, node: NodeSpec, code_digest: str | None, inputs: dict[str, Any]) -> str:
    """The key of one node call. Pure: the same call always gets the same key."""
    identity: dict[str, Any] = {
        "flow": flow, "node": node.name, "requires": list(node.requires), "provides": list(node.provides),
        "streams": list(node.streams), "code": code_digest, "inputs": inputs,
    }
    if node.map:  # an element: its inputs hold its own values of the mapped messages
        identity["map"] = [list(pair) for pair in node.map]
    return "sha256:" + hashlib.sha256(canonical(identity).encode()).hexdigest()


def cacheable(outputs: dict[str, Any] | None) -> bool:
    """Whether outputs are small enough to be an entry."""
    if outputs is None:
        return False
    try:
        return len(canonical(outputs).encode()) <= MAX_CACHED_OUTPUT_BYTES
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class CacheHit:
    #: The run whose call produced the outputs (never a run that itself restored them), and the element
    #: of its mapped node that did (``None``: the node was not mapped there).
    run_id: str
    outputs: dict[str, Any]
    element: int | None = None
