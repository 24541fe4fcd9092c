"""Why a node call was not restored from the run cache, as its driver tells its row: read from the run history
on a real SQLite store (the rows an earlier run left), never guessed."""

from __future__ import annotations

from typing import Any

import pytest

from fluksio import Artifact, Flow
from fluksio.artifacts import MemoryArtifactStore
from fluksio.cache.lookup import GONE
from fluksio.cache.node_cache import NO_CACHE, NO_KEY, NOT_CACHED, NodeCache
from fluksio.store.nodes import NodeRow, record_nodes
from tests.unit.store.runs import add_run

flow = Flow("misses", inputs={"x": int})


@flow.node(provides="total")
def total(x: int) -> int:
    return x + 1


@flow.node(provides="kept", cache=False)
def kept(total: int) -> int:
    return total


INPUTS: dict[str, dict[str, Any]] = {"total": {"x": 1}, "kept": {"total": 2}}


@pytest.fixture
def artifacts() -> MemoryArtifactStore:
    return MemoryArtifactStore()


def cache_of(db, artifacts, run_id: str, use_cache: bool = True, inputs: dict[str, Any] | None = None) -> NodeCache:
    return NodeCache(db, artifacts, flow, "sha256:flow", use_cache,
                     lambda unit: inputs if inputs is not None and unit == "total" else INPUTS[unit], run_id)


def earlier(db, cache: NodeCache, code: str | None, key: str | None, outputs: Any = None, run_flow: str = "misses",
            status: str = "ok") -> str:
    """An earlier run of the flow whose call of ``total`` ended ``status`` under ``code`` and ``key``."""
    run_id = add_run(db, flow=run_flow)
    record_nodes(db, [NodeRow(run_id=run_id, node="total", status=status, cache_key=key, node_code=code,
                              outputs=outputs if outputs is not None else {"total": 2})])
    return run_id


def test_a_node_with_no_earlier_successful_call_says_so(db, artifacts):
    cache = cache_of(db, artifacts, add_run(db, flow="misses"))
    earlier(db, cache, cache.code("total"), "sha256:other", status="error")      # a failed call is no entry
    earlier(db, cache, cache.code("total"), "sha256:other", run_flow="another")  # nor another flow's node
    assert cache.hit("total") is None
    assert cache.why("total") == "no earlier call of `total` succeeded"
    assert cache.why("total") is None  # told once, to the row


def test_a_call_under_other_code_says_the_nodes_code_changed(db, artifacts):
    cache = cache_of(db, artifacts, add_run(db, flow="misses"))
    earlier(db, cache, "sha256:older", "sha256:other")
    assert cache.code("total") not in ("sha256:older", "sha256:flow")  # the node's own identity
    assert cache.hit("total") is None and cache.why("total") == "code of `total` changed"


def test_a_call_under_the_same_code_says_the_inputs_changed_or_that_its_outputs_were_too_large(db, artifacts):
    cache = cache_of(db, artifacts, add_run(db, flow="misses"))
    earlier(db, cache, cache.code("total"), "sha256:other-inputs")
    assert cache.hit("total") is None and cache.why("total") == "inputs changed"
    big = cache_of(db, artifacts, add_run(db, flow="misses"), inputs={"x": 2})
    earlier(db, big, big.code("total"), None)  # the newest call left no entry
    assert big.hit("total") is None
    assert big.why("total") == "its earlier outputs were too large to cache (over 256 kB as JSON)"


def test_the_runs_own_rows_are_not_an_earlier_call(db, artifacts):
    run_id = add_run(db, flow="misses")
    cache = cache_of(db, artifacts, run_id)
    record_nodes(db, [NodeRow(run_id=run_id, node="total", status="ok", cache_key="sha256:x", node_code="sha256:y")])
    assert cache.hit("total") is None and cache.why("total") == "no earlier call of `total` succeeded"


def test_an_entry_whose_artifacts_are_gone_says_so_and_one_that_is_whole_is_a_hit(db, artifacts):
    cache = cache_of(db, artifacts, add_run(db, flow="misses"))
    stored = artifacts.put(Artifact.from_bytes(b"model", name="m.bin"))
    origin = earlier(db, cache, cache.code("total"), cache.key("total"), outputs={"total": stored.to_ref()})
    found = cache.hit("total")
    assert found is not None and found[1].run_id == origin and cache.why("total") is None
    artifacts.delete(stored.digest)
    again = cache_of(db, artifacts, add_run(db, flow="misses"))
    assert again.hit("total") is None and again.why("total") == GONE


def test_no_cache_runs_and_uncached_nodes_say_why_nothing_was_looked_up(db, artifacts):
    run_id = add_run(db, flow="misses")
    assert cache_of(db, artifacts, run_id, use_cache=False).hit("total") is None
    off = cache_of(db, artifacts, run_id, use_cache=False)
    off.hit("total")
    assert off.why("total") == NO_CACHE
    on = cache_of(db, artifacts, run_id)
    assert on.hit("kept") is None and on.why("kept") == NOT_CACHED
    unkeyable = cache_of(db, artifacts, run_id, inputs={"x": float("nan")})
    assert unkeyable.hit("total") is None and unkeyable.why("total") == NO_KEY
