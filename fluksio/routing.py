"""Which queue a node call travels on: ``<label>@<machine>``. The one home of the rule, for both ends of the wire.

A driver sends a call to the queue of the label its node asked for, at the machine the placer chose; a
worker consumes one queue per label it carries (its name is one of them), plus ``default@<its name>``
for nodes that ask for no label.
"""

from __future__ import annotations

from fluksio.constants import DEFAULT_LABEL
from fluksio.schemas import Grant, Inventory


def queue_name(label: str | None, machine: str) -> str:
    """``<label>@<machine>``; no label is the ``default`` queue."""
    return f"{label or DEFAULT_LABEL}@{machine}"


def queue_for(grant: Grant) -> str:
    """The queue of a granted call: a ``prefer`` node placed on a machine without its label goes to ``default``."""
    return queue_name(grant.queue_label, grant.machine)


def node_queues(inventory: Inventory) -> list[str]:
    """The queues a machine's node worker consumes: one per label it carries, its name, and default."""
    labels = [DEFAULT_LABEL, inventory.name, *inventory.labels]
    return [queue_name(label, inventory.name) for label in dict.fromkeys(labels)]
