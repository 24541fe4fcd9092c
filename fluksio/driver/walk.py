"""Which parts of a run are ready, done, failed or never to run. Pure: the driver's bookkeeping.

The walk hands out *units*: a node's name, or ``node[i]`` for element ``i`` of
a mapped node (one call each). A node is decided once every message it needs
is there (or was skipped): it is skipped (a condition said no, or a message it
needs without a default was skipped), fails (a mapped message is no list), maps
over no elements, or becomes ready — once, or once per element.

When a node fails, everything downstream of it is skipped while independent
branches go on. A skip by a condition propagates too, but a parameter with a
default takes its default instead, so branches can join. The run has drained
when nothing is running and nothing pending could still become ready.

Every change costs time in proportion to the units it touches, never to the
size of the graph or of a map, so a 10,000-node run or a 10,000-element map
costs its driver linear time.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from fluksio.flows.flow import Flow
from fluksio.schemas import NodeStatus, split_unit, unit_of

#: The longest list (product of lists) a mapped node maps over unless the settings say otherwise.
MAX_ELEMENTS = 100_000


class NodeState(str, Enum):
    """Where a node is in the walk. A node's row says its end in :class:`~fluksio.schemas.NodeStatus`
    words: ``DONE`` is ``ok`` (or ``cached``, when restored), ``FAILED`` is ``error``; ``SKIPPED`` and
    ``CANCELLED`` are the same word; ``PENDING`` and ``RUNNING`` never reach a row."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


#: The one mapping between the two vocabularies (see :class:`NodeState`).
ROW_STATUS: dict[NodeState, NodeStatus] = {
    NodeState.DONE: NodeStatus.OK, NodeState.FAILED: NodeStatus.ERROR,
    NodeState.SKIPPED: NodeStatus.SKIPPED, NodeState.CANCELLED: NodeStatus.CANCELLED,
}


@dataclass(frozen=True, slots=True)
class Ended:
    """A node the walk ended without a call of its own, for its row: skipped, failed before a call, or a
    map over no elements (``ok``, with empty lists as ``outputs``)."""

    node: str
    status: NodeStatus
    reason: str
    outputs: dict[str, Any] | None = None


@dataclass(slots=True)
class _Elements:
    """A mapped node in progress: its elements' values, their outputs as they come, and who may start."""

    #: Element i's values, one per mapped message (the product, first message varying slowest).
    combos: list[tuple[Any, ...]]
    outputs: list[Mapping[str, Any] | None]
    #: Elements not released yet (``max_parallel`` holds them back), lowest index first.
    held: deque[int]
    #: Elements released and not ended (ready, running, or between retries).
    released: int = 0
    #: Elements not ended yet.
    left: int = 0
    failed: list[int] = field(default_factory=list)


class Walk:
    """One run's progress through its flow: the messages made, each node's state, what is ready.

    Invariants: a unit is handed out by :meth:`take_fresh` once per time it becomes ready (again, after
    :meth:`retry`); a node leaves ``PENDING`` only when every message it needs is there or skipped; a
    mapped node is ``RUNNING`` from its first element's release until its last element ends.
    """

    def __init__(self, flow: Flow, params: Mapping[str, Any], max_elements: int = MAX_ELEMENTS) -> None:
        self.flow = flow
        self.max_elements = max_elements
        order = flow.order
        self.position = {name: i for i, name in enumerate(order)}
        self.messages: dict[str, Any] = {name: params[name] for name in flow.inputs if name in params}
        #: Messages never to be made: their provider was skipped.
        self.skipped: set[str] = set()
        self.state: dict[str, NodeState] = dict.fromkeys(order, NodeState.PENDING)
        #: message → the nodes that need it
        self.consumers: dict[str, list[str]] = {}
        #: node → how many of the messages it needs are neither there nor skipped
        self.missing: dict[str, int] = {}
        #: Why each skipped node was skipped; the failed unit (``count[3]``) → its error.
        self.skip_reasons: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        #: Nodes skipped because something upstream failed (not by a condition).
        self.failure_skipped: set[str] = set()
        self._elements: dict[str, _Elements] = {}
        self._ready: dict[str, None] = {}
        self._fresh: list[str] = []
        self._running: dict[str, None] = {}
        self._failed: list[str] = []
        self._ended: list[Ended] = []
        for name in order:
            needed = set(flow.nodes[name].needs)
            for message in needed:
                self.consumers.setdefault(message, []).append(name)
            self.missing[name] = sum(1 for m in needed if m not in self.messages)
        for name in order:
            if self.missing[name] == 0:
                self._decide(name)

    # -- reading ----------------------------------------------------------------------------------

    def ready(self) -> list[str]:
        """Units ready to be called, nodes in topological order (elements by index)."""
        return sorted(self._ready, key=self._sort_key)

    def _sort_key(self, unit: str) -> tuple[int, int]:
        node, index = split_unit(unit)
        return self.position[node], -1 if index is None else index

    @property
    def has_fresh(self) -> bool:
        """Whether some unit became ready (or is to be retried) since the last ``take_fresh``."""
        return bool(self._fresh)

    def take_fresh(self) -> list[str]:
        """Units that became ready since the last call (each returned once), in the order they did."""
        fresh, self._fresh = self._fresh, []
        return [u for u in fresh if u in self._ready]

    def take_ended(self) -> list[Ended]:
        """Nodes the walk ended without a call since the last call (each once): they need rows."""
        ended, self._ended = self._ended, []
        return ended

    def inputs_of(self, unit: str) -> dict[str, Any]:
        """The unit's arguments, by message name: an element gets its own values of the mapped messages.

        A message that was skipped is left out: its parameter takes its default.
        """
        node, index = split_unit(unit)
        spec = self.flow.nodes[node]
        inputs = {m: self.messages[m] for m in spec.requires if m in self.messages}
        if index is not None:
            inputs.update(zip(spec.mapped, self._elements[node].combos[index]))
        return inputs

    def elements(self, node: str) -> int | None:
        """How many elements a mapped node in progress (or done) maps over; ``None`` for others."""
        found = self._elements.get(node)
        return None if found is None else len(found.combos)

    def unstarted_elements(self, node: str) -> int:
        """Elements of a mapped node in progress that were never started (held back, or ready)."""
        found = self._elements.get(node)
        if found is None:
            return 0
        return len(found.held) + sum(1 for u in self._ready if split_unit(u)[0] == node)

    def running(self) -> list[str]:
        return list(self._running)

    def failed(self) -> list[str]:
        return list(self._failed)

    def failed_elements(self, node: str) -> list[str]:
        """The failed units of a mapped node (``count[3]`` …), in index order."""
        found = self._elements.get(node)
        return [unit_of(node, i) for i in sorted(found.failed)] if found else []

    @property
    def drained(self) -> bool:
        """Nothing is running and nothing pending can ever become ready."""
        return not self._running and not self._ready

    def result(self) -> dict[str, Any]:
        """The run's result: its result messages that were made; a skipped one is ``None``."""
        return {m: self.messages.get(m) for m in self.flow.result_messages
                if m in self.messages or m in self.skipped}

    # -- deciding a node --------------------------------------------------------------------------

    def _decide(self, node: str) -> None:
        """Every message ``node`` needs is there or skipped: skip it, fail it, or make it ready."""
        spec = self.flow.nodes[node]
        for message in spec.needs:
            if message in self.skipped and (message in spec.conditions or message not in spec.optional):
                self._skip(node, f"skipped: {message!r} was not made (its node was skipped)")
                return
        if spec.when is not None and not self.messages[spec.when]:
            self._skip(node, f"skipped: {spec.when!r} was false")
            return
        if spec.unless is not None and self.messages[spec.unless]:
            self._skip(node, f"skipped: {spec.unless!r} was true")
            return
        if not spec.map:
            self._release(node)
            return
        lists = []
        for param, message in spec.map:
            value = self.messages[message]
            if not isinstance(value, list):
                self._fail_node(node, f"node {node!r} maps {param!r} over {message!r}, which is a "
                                      f"{type(value).__name__}, not a list")
                return
            lists.append(value)
        total = math.prod(len(values) for values in lists)
        if total > self.max_elements:
            self._fail_node(node, f"node {node!r} would map over {total} elements, more than max_elements "
                                  f"({self.max_elements}); map over fewer, or raise FLUKSIO_MAX_ELEMENTS")
            return
        if total == 0:
            empty = [m for m, values in zip(spec.mapped, lists) if not values]
            outputs: dict[str, Any] = {m: [] for m in spec.messages}
            self.state[node] = NodeState.DONE
            self._ended.append(Ended(node, NodeStatus.OK, f"mapped over no elements ({empty[0]!r} is empty)",
                                     outputs))
            self._made(node, outputs)
            return
        elements = _Elements(combos=list(itertools.product(*lists)), outputs=[None] * total,
                             held=deque(range(total)), left=total)
        self._elements[node] = elements
        self.state[node] = NodeState.RUNNING
        self._release_elements(node, elements)

    def _release(self, unit: str) -> None:
        self._ready[unit] = None
        self._fresh.append(unit)

    def _release_elements(self, node: str, elements: _Elements) -> None:
        cap = self.flow.nodes[node].max_parallel or len(elements.combos)
        while elements.held and elements.released < cap:
            elements.released += 1
            self._release(unit_of(node, elements.held.popleft()))

    def _skip(self, node: str, reason: str) -> None:
        self.state[node] = NodeState.SKIPPED
        self.skip_reasons[node] = reason
        self._ended.append(Ended(node, NodeStatus.SKIPPED, reason))
        for message in self.flow.nodes[node].messages:
            self.skipped.add(message)
            self._arrived(message)

    def _made(self, node: str, outputs: Mapping[str, Any]) -> None:
        for message in self.flow.nodes[node].messages:
            first_time = message not in self.messages
            self.messages[message] = outputs.get(message)
            if first_time:
                self._arrived(message)

    def _arrived(self, message: str) -> None:
        """A message is there (or skipped): its consumers that now have everything are decided."""
        for consumer in self.consumers.get(message, ()):
            self.missing[consumer] -= 1
            if self.missing[consumer] == 0 and self.state[consumer] is NodeState.PENDING:
                self._decide(consumer)

    # -- changing ---------------------------------------------------------------------------------

    def start(self, unit: str) -> None:
        node, _index = split_unit(unit)
        self.state[node] = NodeState.RUNNING
        self._ready.pop(unit, None)
        self._running[unit] = None

    def complete(self, unit: str, outputs: Mapping[str, Any]) -> None:
        """The unit ended well with ``outputs`` (by message); a mapped node is done once its last element is."""
        node, index = split_unit(unit)
        self._ready.pop(unit, None)
        self._running.pop(unit, None)
        if index is None:
            self.state[node] = NodeState.DONE
            self._made(node, outputs)
            return
        elements = self._elements[node]
        elements.outputs[index] = outputs
        self._element_ended(node, elements)

    def _element_ended(self, node: str, elements: _Elements) -> list[str]:
        """One more element of ``node`` ended; returns the nodes skipped when that failed the node."""
        elements.left -= 1
        elements.released -= 1
        self._release_elements(node, elements)
        if elements.left or self.state[node] is not NodeState.RUNNING:
            return []
        if elements.failed:
            return self._fail_node(node, None)
        self.state[node] = NodeState.DONE
        self._made(node, {m: [out.get(m) if out is not None else None for out in elements.outputs]
                          for m in self.flow.nodes[node].messages})
        return []

    def retry(self, unit: str) -> None:
        """Run the unit again (its inputs are still there)."""
        node, index = split_unit(unit)
        if index is None:
            self.state[node] = NodeState.PENDING
        self._running.pop(unit, None)
        self._release(unit)

    def fail(self, unit: str, error: str | None = None) -> list[str]:
        """The unit failed for good. A node fails at once; a mapped node once its other elements ended.

        Returns the nodes newly skipped because of it, in topological order (each also reported by
        :meth:`take_ended`).
        """
        node, index = split_unit(unit)
        self._ready.pop(unit, None)
        self._running.pop(unit, None)
        if error is not None:
            self.errors[unit] = error
        if index is None:
            return self._fail_node(node, None)
        elements = self._elements[node]
        elements.failed.append(index)
        return self._element_ended(node, elements)

    def _fail_node(self, node: str, error: str | None) -> list[str]:
        """``node`` failed (``error``: before any call, which gives it a row): skip what depends on it."""
        self.state[node] = NodeState.FAILED
        self._failed.append(node)
        if error is not None:
            self.errors[node] = error
            self._ended.append(Ended(node, NodeStatus.ERROR, error))
        skipped: list[str] = []
        frontier = [node]
        while frontier:
            upstream = frontier.pop()
            for message in self.flow.nodes[upstream].messages:
                for consumer in self.consumers.get(message, ()):
                    if self.state[consumer] is NodeState.PENDING:
                        self.state[consumer] = NodeState.SKIPPED
                        self.failure_skipped.add(consumer)
                        reason = f"skipped: upstream node {node!r} failed"
                        self.skip_reasons[consumer] = reason
                        self._ended.append(Ended(consumer, NodeStatus.SKIPPED, reason))
                        skipped.append(consumer)
                        frontier.append(consumer)
        return sorted(skipped, key=self.position.__getitem__)

    def cancel(self, unit: str) -> None:
        """A running unit was killed by a cancel."""
        node, _index = split_unit(unit)
        self._running.pop(unit, None)
        self.state[node] = NodeState.CANCELLED

    def cancel_pending(self) -> list[str]:
        """Stop scheduling: every pending node becomes cancelled, and so does every mapped node in progress
        (their unstarted elements never start). Returns the nodes that had not started at all."""
        cancelled = [n for n, s in self.state.items() if s is NodeState.PENDING]
        for name in cancelled:
            self.state[name] = NodeState.CANCELLED
        for node, elements in self._elements.items():
            if self.state[node] is NodeState.RUNNING:
                self.state[node] = NodeState.CANCELLED
                elements.held.clear()
        self._ready.clear()
        return cancelled
