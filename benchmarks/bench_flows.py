"""The flows the benchmarks run; benchmark workers register this file through ``FLUKSIO_FLOWS``.

``BENCH_FLOW_SIZES`` (``chain=200,20;fanout=1000,50``) says which sizes exist, so the client and the
workers of one benchmark register the same flows. Every node is a no-op: what is measured is the
cost of moving from one node to the next, not the work inside.
"""

from __future__ import annotations

import os
import time

from fluksio import Flow

#: Sizes registered when ``BENCH_FLOW_SIZES`` is not set.
DEFAULT_SIZES = "chain=200;fanout=1000"


def hop(previous: int | None = None) -> int:
    """A no-op node: takes the previous node's value (if any) and returns a small one."""
    return 0


def chain_name(length: int) -> str:
    return f"bench_chain_{length}"


def fanout_name(width: int) -> str:
    return f"bench_fanout_{width}"


def chain(length: int) -> Flow:
    """``length`` dependent nodes: n0 → n1 → … each requiring the message of the one before."""
    flow = Flow(chain_name(length), outputs=[f"m{length - 1}"])
    for i in range(length):
        flow.node(hop, name=f"n{i}", provides=f"m{i}", requires=[f"m{i - 1}"] if i else [])
    return flow


def fanout(width: int) -> Flow:
    """``width`` independent nodes (every one ready at once); the result is the first one's message."""
    flow = Flow(fanout_name(width), outputs=["m0"])
    for i in range(width):
        flow.node(hop, name=f"n{i}", provides=f"m{i}", requires=[])
    return flow


#: One no-op call per element of ``items``: a map of any size is this flow with a longer list.
mapped = Flow("bench_map", inputs={"items": list[int]}, outputs=["done"])
mapped.node(hop, name="each", provides="done", map={"previous": "items"})


one = Flow("bench_one", outputs=["x"])
one.node(hop, name="only", provides="x", requires=[])


cold = Flow("bench_cold", inputs={"mark": str}, outputs=["started"])


@cold.node(provides="started")
def first(mark: str) -> float:
    """Writes the wall-clock time it started to the file ``mark``: the end of a cold start."""
    now = time.time()
    with open(mark, "w") as out:
        out.write(repr(now))
    return now


emitter = Flow("bench_emit", inputs={"count": int}, outputs=["done"])


@emitter.node(provides="done", streams=["loss"])
def emit_many(count: int, emit) -> float:  # type: ignore[no-untyped-def]
    """Emits ``count`` numeric values on one streaming port; returns the seconds its own loop took."""
    started = time.perf_counter()
    for step in range(count):
        emit("loss", 1.0 / (step + 1))
    return time.perf_counter() - started


def _parse(spec: str) -> dict[str, list[int]]:
    sizes: dict[str, list[int]] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        kind, _, numbers = part.partition("=")
        sizes[kind.strip()] = [int(n) for n in numbers.split(",") if n.strip()]
    return sizes


for _kind, _numbers in _parse(os.environ.get("BENCH_FLOW_SIZES", DEFAULT_SIZES)).items():
    for _n in _numbers:
        _flow = {"chain": chain, "fanout": fanout}[_kind](_n)
        globals()[_flow.name] = _flow
