"""Flows: the graph model, its validation and where flows are found. Pure: no Celery, no SQL."""

from fluksio.flows.flow import Flow, InputSpec
from fluksio.flows.node import NodeSpec
from fluksio.flows.registry import FlowRegistry, load_flows

__all__ = ["Flow", "FlowRegistry", "InputSpec", "NodeSpec", "load_flows"]
