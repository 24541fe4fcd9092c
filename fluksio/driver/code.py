"""Which flow a driver walks for a run: the code this process registered, or the run's graph as data.

A run records the code it was submitted with (runs/code.py). A driver that registered that very code
(``FLUKSIO_FLOWS``, or the submitting process itself) walks its own flow, as it always did. One that did not
walks the graph the run shipped, described as data (flows/manifest.py): nodes, messages, maps, conditions,
subflows and options are all a driver needs, so it never imports the run's code. Its workers run the code
from the package, if they trust it.

Where the installation runs only registered code (``FLUKSIO_ACCEPT_CODE=registered``, the default), a run
submitted with other code is refused here, at claim, naming both digests: never run on the code the
workers happen to hold.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

from fluksio.errors import FluksioError, first_line
from fluksio.flows.flow import Flow
from fluksio.flows.manifest import rebuild
from fluksio.flows.source import short
from fluksio.runs.code import known_types
from fluksio.runtime import Runtime
from fluksio.store.models import Run

#: Graphs rebuilt from their description kept per process (a driver drives many runs of one package).
KEPT_GRAPHS = 32


class CodeRefused(FluksioError):
    """A run's code cannot be run by this installation: the run ends ``error`` saying why."""


_graphs: OrderedDict[tuple[str, str], Flow] = OrderedDict()
_graphs_lock = threading.Lock()


def flow_to_drive(runtime: Runtime, run: Run) -> Flow:
    """The flow to walk for ``run``: registered here with the run's code, or rebuilt from its shipped graph.

    Raises :class:`CodeRefused` (or the registry's :class:`~fluksio.errors.FlowNotFound`) saying why not.
    """
    registry = runtime.registry
    if run.code_digest is None:  # a run of a process that recorded no code: the flow registered under its name
        return registry.get(run.flow)
    flow = registry.version(run.flow, run.code_digest)
    if flow is not None:
        return flow
    if run.code_entry is None or run.graph_digest is None:
        raise CodeRefused(
            f"flow {run.flow!r} of run {run.id} was submitted with code {short(run.code_digest)}, which did not "
            f"travel with it (the flow has no file, or its files changed after the submitter loaded them) and "
            f"which machine {runtime.machine} does not hold ({_held(runtime, run.flow)}); submit it again from a "
            "process that loaded the flow's files as they are")
    if runtime.settings.accept_code == "registered":
        raise CodeRefused(
            f"flow {run.flow!r} of run {run.id} was submitted with code {short(run.code_digest)}, and machine "
            f"{runtime.machine} runs only the code it registered ({_held(runtime, run.flow)}; "
            "FLUKSIO_ACCEPT_CODE=registered): restart the workers on the submitter's code, or set "
            "FLUKSIO_ACCEPT_CODE=signed (or any) on them to run the code shipped with each run")
    return _described(runtime, run)


def _held(runtime: Runtime, flow: str) -> str:
    if flow in runtime.registry.names():
        return f"it holds {short(runtime.registry.digest(flow))}"
    return "it holds no flow of that name"


def _described(runtime: Runtime, run: Run) -> Flow:
    """The run's graph rebuilt from its stored description (kept per process, by graph and code)."""
    assert run.code_digest is not None and run.graph_digest is not None
    key = (run.graph_digest, run.code_digest)
    with _graphs_lock:
        flow = _graphs.get(key)
        if flow is not None:
            _graphs.move_to_end(key)
            return flow
    try:
        flow = rebuild(json.loads(runtime.artifacts.get(run.graph_digest)), code_digest=run.code_digest,
                       known_types=known_types())
    except (FluksioError, ValueError) as exc:
        raise CodeRefused(f"the graph of run {run.id} (artifact {run.graph_digest}) cannot be read: "
                          f"{first_line(str(exc))}") from None
    with _graphs_lock:
        _graphs[key] = flow
        while len(_graphs) > KEPT_GRAPHS:
            _graphs.popitem(last=False)
    return flow
