"""Which nodes of a run are ready, done, failed or never to run. Pure: the driver's bookkeeping.

A node is ready when every message it requires is available. When a node
fails, everything downstream of it is skipped while independent branches go
on; the run has drained when nothing is pending that could still become ready.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from fluksio.flows.flow import Flow
from fluksio.flows.validation import INPUT


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
        self.providers = flow.providers
        self.messages: dict[str, Any] = {name: params[name] for name in flow.inputs if name in params}
        self.state: dict[str, NodeState] = dict.fromkeys(flow.order, NodeState.PENDING)

    def ready(self) -> list[str]:
        """Pending nodes whose inputs are all available, in topological order."""
        return [
            name for name, state in self.state.items()
            if state is NodeState.PENDING and all(m in self.messages for m in self.flow.nodes[name].requires)
        ]

    def inputs_of(self, node: str) -> dict[str, Any]:
        """The node's arguments, by message name."""
        return {m: self.messages[m] for m in self.flow.nodes[node].requires}

    def start(self, node: str) -> None:
        self.state[node] = NodeState.RUNNING

    def complete(self, node: str, outputs: Mapping[str, Any]) -> None:
        self.state[node] = NodeState.DONE
        for message in self.flow.nodes[node].messages:
            self.messages[message] = outputs.get(message)

    def fail(self, node: str) -> list[str]:
        """Mark a node failed; returns the nodes that are now skipped because of it."""
        self.state[node] = NodeState.FAILED
        return self._skip_downstream()

    def cancel_pending(self) -> list[str]:
        """Stop scheduling: every pending node becomes cancelled. Returns them."""
        cancelled = [n for n, s in self.state.items() if s is NodeState.PENDING]
        for name in cancelled:
            self.state[name] = NodeState.CANCELLED
        return cancelled

    def _skip_downstream(self) -> list[str]:
        skipped = []
        for name in self.flow.order:  # topological: upstream skips are seen before their dependents
            if self.state[name] is not NodeState.PENDING:
                continue
            for message in self.flow.nodes[name].requires:
                provider = self.providers[message]
                if provider != INPUT and self.state[provider] in (NodeState.FAILED, NodeState.SKIPPED):
                    self.state[name] = NodeState.SKIPPED
                    skipped.append(name)
                    break
        return skipped

    def running(self) -> list[str]:
        return [n for n, s in self.state.items() if s is NodeState.RUNNING]

    def failed(self) -> list[str]:
        return [n for n, s in self.state.items() if s is NodeState.FAILED]

    @property
    def drained(self) -> bool:
        """Nothing is running and nothing pending can ever become ready."""
        if self.running():
            return False
        return not self.ready()

    def result(self) -> dict[str, Any]:
        return {m: self.messages.get(m) for m in self.flow.result_messages if m in self.messages}
