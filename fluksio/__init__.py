"""fluksio: run graphs of Python functions as recorded, cached, cancellable runs on Celery.

The public names::

    from fluksio import Flow, Resources, Artifact, Secret, connect
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fluksio.artifacts.artifact import Artifact
    from fluksio.client import Client, RunHandle, Sweep, connect
    from fluksio.errors import ConfigError, FlowError, FlowNotFound, FluksioError, RunNotFound, RunRejected
    from fluksio.flows.flow import Flow
    from fluksio.flows.secret import Secret
    from fluksio.flows.subflow import Message
    from fluksio.schemas import NodeRecord, Resources, RunRecord, RunStatus
    from fluksio.settings import Settings

__all__ = [
    "Artifact", "Client", "ConfigError", "Flow", "FlowError", "FlowNotFound", "FluksioError", "Message", "NodeRecord",
    "Resources", "RunHandle", "RunNotFound", "RunRecord", "RunRejected", "RunStatus", "Secret", "Settings", "Sweep",
    "connect",
]
__version__ = "0.1.0"

#: Where each public name lives, imported on its first use (PEP 562): the client pulls in Celery and SQLAlchemy,
#: the settings pydantic-settings, and a module that only wants ``fluksio.errors`` (or ``fluksio --help``) must
#: not pay for them. ``from fluksio import Flow`` works as ever; it imports ``fluksio.flows.flow`` then.
_HOMES = {
    "Artifact": "fluksio.artifacts.artifact",
    "Client": "fluksio.client", "RunHandle": "fluksio.client", "Sweep": "fluksio.client", "connect": "fluksio.client",
    "ConfigError": "fluksio.errors", "FlowError": "fluksio.errors", "FlowNotFound": "fluksio.errors",
    "FluksioError": "fluksio.errors", "RunNotFound": "fluksio.errors", "RunRejected": "fluksio.errors",
    "Flow": "fluksio.flows.flow",
    "Secret": "fluksio.flows.secret",
    "Message": "fluksio.flows.subflow",
    "NodeRecord": "fluksio.schemas", "Resources": "fluksio.schemas", "RunRecord": "fluksio.schemas",
    "RunStatus": "fluksio.schemas",
    "Settings": "fluksio.settings",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fluksio' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found once: later uses are a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
