"""Whole-graph checks, run once the flow is complete: providers, outputs, cycles."""

from __future__ import annotations

from collections.abc import Mapping

from fluksio.errors import FlowError, did_you_mean
from fluksio.flows.node import NodeSpec

#: Marker for "provided by the flow's parameters".
INPUT = "<input>"


def providers_of(inputs: Mapping[str, object], nodes: Mapping[str, NodeSpec], flow_name: str) -> dict[str, str]:
    """Map every message to what provides it (a node name, or :data:`INPUT`); two providers is an error."""
    claims: dict[str, list[str]] = {name: [INPUT] for name in inputs}
    for node in nodes.values():
        for message in node.messages:
            claims.setdefault(message, []).append(node.name)
    clashes = {m: who for m, who in claims.items() if len(who) > 1}
    if clashes:
        detail = "; ".join(
            f"{m!r} by {' and '.join('the inputs' if w == INPUT else f'node {w!r}' for w in who)}"
            for m, who in sorted(clashes.items())
        )
        raise FlowError(f"flow {flow_name!r}: a message must have one provider, but {detail} provide it")
    return {m: who[0] for m, who in claims.items()}


def validate_graph(
    flow_name: str, inputs: Mapping[str, object], nodes: Mapping[str, NodeSpec], outputs: list[str] | None
) -> dict[str, str]:
    """Raise :class:`FlowError` naming every offender; return each message's provider."""
    if not nodes:
        raise FlowError(f"flow {flow_name!r} has no nodes; add one with @flow.node")
    providers = providers_of(inputs, nodes, flow_name)
    missing = sorted(
        f"{m!r} ({'required by' if m in node.requires else 'the condition of'} {node.name!r}"
        f"{did_you_mean(m, providers, before=', ')})"
        for node in nodes.values() for m in node.needs if m not in providers
    )
    if missing:
        known = ", ".join(sorted(providers)) or "none"
        raise FlowError(
            f"flow {flow_name!r}: nobody provides {', '.join(missing)}; declare it in inputs= or have a node "
            f"provide it (known messages: {known})"
        )
    if outputs is not None:
        orphans = [o for o in outputs if o not in providers]
        if orphans:
            guesses = "".join(did_you_mean(o, providers, before=f"; for {o!r} ") for o in orphans)
            raise FlowError(
                f"flow {flow_name!r}: output(s) {', '.join(map(repr, orphans))} are provided by no node or input "
                f"(known messages: {', '.join(sorted(providers)) or 'none'}){guesses}"
            )
    cycle = find_cycle(nodes, providers)
    if cycle:
        raise FlowError(f"flow {flow_name!r} has a cycle: {' -> '.join(cycle)}")
    return providers


def find_cycle(nodes: Mapping[str, NodeSpec], providers: Mapping[str, str]) -> list[str]:
    """One cycle as a list of node names (first repeated last), or ``[]``."""
    upstream = {
        name: sorted({providers[m] for m in node.needs if providers.get(m, INPUT) != INPUT})
        for name, node in nodes.items()
    }
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(nodes, white)
    for start in nodes:
        if colour[start] != white:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = []
        while stack:
            name, index = stack.pop()
            if index == 0:
                colour[name] = grey
                path.append(name)
            deps = upstream[name]
            if index < len(deps):
                stack.append((name, index + 1))
                dep = deps[index]
                if colour[dep] == grey:
                    return path[path.index(dep):] + [dep]
                if colour[dep] == white:
                    stack.append((dep, 0))
            else:
                colour[name] = black
                path.pop()
    return []


def topological_order(nodes: Mapping[str, NodeSpec], providers: Mapping[str, str]) -> list[str]:
    """Node names so that each comes after every node it requires (ties by declaration order)."""
    order: list[str] = []
    placed: set[str] = set()
    remaining = list(nodes)
    while remaining:
        progressed = False
        for name in list(remaining):
            deps = {providers[m] for m in nodes[name].needs if providers[m] != INPUT}
            if deps <= placed:
                order.append(name)
                placed.add(name)
                remaining.remove(name)
                progressed = True
        if not progressed:  # validate_graph rejects cycles first; this guards direct callers
            raise FlowError(f"cycle among {', '.join(remaining)}")
    return order
