"""fluksio: run graphs of Python functions as recorded, cached, cancellable runs on Celery.

The public names::

    from fluksio import Flow, Resources, Artifact, connect
"""

from fluksio.artifacts.artifact import Artifact
from fluksio.client import Client, RunHandle, Sweep, connect
from fluksio.errors import ConfigError, FlowError, FlowNotFound, FluksioError, RunNotFound, RunRejected
from fluksio.flows.flow import Flow
from fluksio.schemas import NodeRecord, Resources, RunRecord, RunStatus
from fluksio.settings import Settings

__all__ = [
    "Artifact", "Client", "ConfigError", "Flow", "FlowError", "FlowNotFound", "FluksioError", "NodeRecord",
    "Resources", "RunHandle", "RunNotFound", "RunRecord", "RunRejected", "RunStatus", "Settings", "Sweep",
    "connect",
]
__version__ = "0.1.0"
