"""Which nodes of a run are ready, done, failed or never to run. Pure: the driver's bookkeeping.

A node is ready when every message it requires is available. When a node
fails, everything downstream of it is skipped while independent branches go
on; the run has drained when nothing is pending that could still become ready.

Every change costs time in proportion to the nodes it touches, never to the
size of the graph, so a 10,000-node run costs its driver linear time.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from fluksio.flows.flow import Flow


class NodeState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class Walk:
    def __init__(self, flow: Flow, params: Mapping[str, Any]) -> None:
        self.flow = flow
        order = flow.order
        self.position = {name: i for i, name in enumerate(order)}
        self.messages: dict[str, Any] = {name: params[name] for name in flow.inputs if name in params}
        self.state: dict[str, NodeState] = dict.fromkeys(order, NodeState.PENDING)
        #: message → the nodes that require it
        self.consumers: dict[str, list[str]] = {}
        #: node → how many of its required messages are not available yet
        self.missing: dict[str, int] = {}
        for name in order:
            required = set(flow.nodes[name].requires)
            for message in required:
                self.consumers.setdefault(message, []).append(name)
            self.missing[name] = sum(1 for m in required if m not in self.messages)
        self._ready: dict[str, None] = {n: None for n in order if self.missing[n] == 0}
        self._fresh: list[str] = list(self._ready)
        self._running: dict[str, None] = {}
        self._failed: list[str] = []

    # -- reading ----------------------------------------------------------------------------------

    def ready(self) -> list[str]:
        """Pending nodes whose inputs are all available, in topological order."""
        return sorted(self._ready, key=self.position.__getitem__)

    @property
    def has_fresh(self) -> bool:
        """Whether some node became ready (or is to be retried) since the last ``take_fresh``."""
        return bool(self._fresh)

    def take_fresh(self) -> list[str]:
        """Nodes that became ready since the last call (each returned once), in the order they did."""
        fresh, self._fresh = self._fresh, []
        return [n for n in fresh if n in self._ready]

    def inputs_of(self, node: str) -> dict[str, Any]:
        """The node's arguments, by message name."""
        return {m: self.messages[m] for m in self.flow.nodes[node].requires}

    def running(self) -> list[str]:
        return list(self._running)

    def failed(self) -> list[str]:
        return list(self._failed)

    @property
    def drained(self) -> bool:
        """Nothing is running and nothing pending can ever become ready."""
        return not self._running and not self._ready

    def result(self) -> dict[str, Any]:
        return {m: self.messages.get(m) for m in self.flow.result_messages if m in self.messages}

    # -- changing ---------------------------------------------------------------------------------

    def start(self, node: str) -> None:
        self.state[node] = NodeState.RUNNING
        self._ready.pop(node, None)
        self._running[node] = None

    def complete(self, node: str, outputs: Mapping[str, Any]) -> None:
        self.state[node] = NodeState.DONE
        self._ready.pop(node, None)
        self._running.pop(node, None)
        for message in self.flow.nodes[node].messages:
            first_time = message not in self.messages
            self.messages[message] = outputs.get(message)
            if not first_time:
                continue
            for consumer in self.consumers.get(message, ()):
                self.missing[consumer] -= 1
                if self.missing[consumer] == 0 and self.state[consumer] is NodeState.PENDING:
                    self._ready[consumer] = None
                    self._fresh.append(consumer)

    def retry(self, node: str) -> None:
        """Run the node again (its inputs are still there)."""
        self.state[node] = NodeState.PENDING
        self._running.pop(node, None)
        self._ready[node] = None
        self._fresh.append(node)

    def fail(self, node: str) -> list[str]:
        """Mark a node failed; returns the nodes that are now skipped because of it, in topological order."""
        self.state[node] = NodeState.FAILED
        self._running.pop(node, None)
        self._ready.pop(node, None)
        self._failed.append(node)
        skipped: list[str] = []
        frontier = [node]
        while frontier:
            upstream = frontier.pop()
            for message in self.flow.nodes[upstream].messages:
                for consumer in self.consumers.get(message, ()):
                    if self.state[consumer] is NodeState.PENDING:
                        self.state[consumer] = NodeState.SKIPPED
                        self._ready.pop(consumer, None)
                        skipped.append(consumer)
                        frontier.append(consumer)
        return sorted(skipped, key=self.position.__getitem__)

    def cancel(self, node: str) -> None:
        """A running node was killed by a cancel."""
        self.state[node] = NodeState.CANCELLED
        self._running.pop(node, None)

    def cancel_pending(self) -> list[str]:
        """Stop scheduling: every pending node becomes cancelled. Returns them."""
        cancelled = [n for n, s in self.state.items() if s is NodeState.PENDING]
        for name in cancelled:
            self.state[name] = NodeState.CANCELLED
        self._ready.clear()
        return cancelled
