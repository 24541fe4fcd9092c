"""Before and while a run waits for machines: labels no machine carries yet, and asking a provisioner.

A run that requires a label no live machine carries stays ``queued``, saying
why, until one attaches; a provisioner that could start such a machine is asked
for one, and what became of the ask is part of the reason.
"""

from __future__ import annotations

import time

from fluksio.errors import FluksioError
from fluksio.flows.flow import Flow
from fluksio.placement.clamp import clamp
from fluksio.runtime import Runtime
from fluksio.schemas import DevicePolicy, Resources, RunStatus
from fluksio.store import run_rows


def missing_labels(runtime: Runtime, flow: Flow) -> list[str]:
    """Labels that ``require`` nodes ask for and no live machine carries."""
    wanted = {n.device for n in flow.nodes.values() if n.device and n.device_policy is DevicePolicy.REQUIRE}
    if not wanted:
        return []  # most flows: nothing to look up (reading the machines was a round trip per run)
    carried = {label for m in runtime.placer.machines() for label in (m.name, *m.labels)}
    return sorted(wanted - carried)


def ask_for_machine(runtime: Runtime, resources: Resources, device: str | None, why: str) -> str | None:
    """Ask a provisioner for a machine that could take the call; what became of the ask, in words."""
    provisioner = runtime.provisioner
    if provisioner is None:
        return None
    # Clamp against the shapes a cluster could start, as the placer does against attached machines.
    shapes = [shape for shape, labels in provisioner.shapes() if device is None or device in labels]
    wanted, _warning = clamp(resources, shapes)
    profile = provisioner.covers(wanted, device)
    if profile is None:
        return None
    try:
        return provisioner.request(profile, why).describe(time.time())
    except FluksioError as exc:  # a cluster that cannot be asked is a reason to show, not a failed run
        return f"could not ask for a machine: {exc}"


def wait_for_labels(runtime: Runtime, run_id: str, flow: Flow, missing: list[str]) -> bool:
    """Keep the run ``queued`` (saying why) until every label it requires is carried by some machine;
    ``missing``: the labels :func:`missing_labels` found no machine carrying.

    Returns ``False`` when the run stopped being queued meanwhile (cancelled, or claimed elsewhere).
    """
    if not missing:
        return True
    wake = lambda: runtime.inbox.wake(run_id)  # noqa: E731
    runtime.placer.add_listener(wake)
    runtime.driving.add(run_id)
    try:
        said = None
        while missing:
            if runtime.stopping.is_set():
                return False
            reason = "Waiting for a worker labelled " + " and ".join(repr(label) for label in missing)
            for label in missing:
                needs = [n for n in flow.nodes.values() if n.device == label]
                asked = ask_for_machine(runtime, needs[0].resources, label, f"run {run_id}") if needs else None
                if asked:
                    reason = f"{reason}; {asked}"
            if reason != said:
                run_rows.set_reason(runtime.db, run_id, reason)
                runtime.events.publish("run_queued", run_id=run_id, flow=flow.name, reason=reason)
                said = reason
            runtime.inbox.pop(run_id, timeout=runtime.settings.lease_interval_s)
            run_rows.touch_queued(runtime.db, run_id)  # held by a driver: not a lost hand-over
            if run_rows.get_run(runtime.db, run_id).status != RunStatus.QUEUED.value:
                return False
            missing = missing_labels(runtime, flow)
        return True
    finally:
        runtime.driving.discard(run_id)
        runtime.placer.remove_listener(wake)
