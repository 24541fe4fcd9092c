"""fluksio: run graphs of Python functions as recorded, cached, cancellable runs on Celery.

The public names::

    from fluksio import Flow, Resources, Artifact, Secret, connect
"""

from typing import TYPE_CHECKING, Any

from fluksio.artifacts.artifact import Artifact
from fluksio.errors import (
    ConfigError,
    FlowError,
    FlowNotFound,
    FluksioError,
    RunNotFound,
    RunRejected,
)
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

if TYPE_CHECKING:
    from fluksio.client import Client, RunHandle, Sweep, connect

#: Imported on first use: the client pulls in Celery and SQLAlchemy, which the pure modules
#: (flows, placement, the walk, cache keys) and their users need not pay for.
_CLIENT_NAMES = frozenset({"Client", "RunHandle", "Sweep", "connect"})


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        from fluksio import client

        return getattr(client, name)
    raise AttributeError(f"module 'fluksio' has no attribute {name!r}")
