"""What the provisioner tests share."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fluksio.provisioners.base import Provisioner
from fluksio.provisioners.config import SlurmProfile
from fluksio.provisioners.request import MachineRequest


@pytest.fixture
def submitted() -> Callable[..., MachineRequest]:
    """``submitted(provisioner, profile, reason="why")``: ask for a machine, wait for the submission
    (``request()`` returns before ``sbatch`` answers), and return the request as it is then: for tests
    of what comes after, which want the job id, or the failure."""

    def submit(provisioner: Provisioner, profile: SlurmProfile | str, reason: str = "why") -> MachineRequest:
        asked = provisioner.request(profile, reason)
        assert provisioner.join_submissions(10), "the submission did not return within 10s"
        now = next((r for r in provisioner.store.live() if r.id == asked.id), None) \
            or provisioner.store.last(asked.profile)
        assert now is not None and now.id == asked.id, f"request {asked.id} is neither live nor its profile's last"
        return now

    return submit
