"""An in-memory provisioner with a pretend scheduler, for tests of everything that uses a provisioner.

Jobs are submitted as ``PENDING``; a test moves them on (:meth:`FakeProvisioner.start`,
:meth:`~FakeProvisioner.attach`, :meth:`~FakeProvisioner.end`, :meth:`~FakeProvisioner.purge`),
can make a profile's submissions fail (:attr:`~FakeProvisioner.refuse`) or hang like a slow
``sbatch`` (:attr:`~FakeProvisioner.gate`). Submissions run on the provisioner's thread, as every
backend's do: a test that needs the job id calls :meth:`~FakeProvisioner.join_submissions`.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fluksio.provisioners.base import Provisioner, ProvisionError
from fluksio.provisioners.config import SlurmProfile
from fluksio.provisioners.jobs import JobState
from fluksio.provisioners.request import MachineRequest
from fluksio.provisioners.store import RequestStore

#: The longest a submission waits at a closed :attr:`FakeProvisioner.gate`, in seconds (a test that
#: forgets to open it fails instead of hanging).
GATE_LIMIT_S = 30.0


@dataclass
class FakeJob:
    job_id: str
    profile: str
    reason: str
    state: str = "PENDING"
    why: str | None = "Priority"
    #: Slurm forgot it (past MinJobAge): squeue no longer lists it.
    purged: bool = False


class FakeProvisioner(Provisioner):
    kind = "fake"

    def __init__(self, profiles: Sequence[SlurmProfile], store: RequestStore | None = None,
                 **kwargs: Any) -> None:
        """``kwargs``: the base's ``clock``, ``retry_after_s`` and ``owner``; attachment is :meth:`attach`."""
        self.attached: set[str] = set()
        super().__init__(profiles, store, self.attached.__contains__, **kwargs)
        self.jobs: dict[str, FakeJob] = {}
        self.cancelled: list[str] = []
        #: Ids of the requests whose :meth:`_settle` ran (each once, when it stopped waiting).
        self.settled: list[str] = []
        #: Profile name → the error its submissions raise (as a refusing ``sbatch`` would).
        self.refuse: dict[str, str] = {}
        #: When set, reading job states raises this (the scheduler does not answer).
        self.unreachable: str | None = None
        #: When set, a submission waits until this event is set (a slow login node), at most
        #: :data:`GATE_LIMIT_S`; :attr:`at_gate` is set while one waits.
        self.gate: threading.Event | None = None
        self.at_gate = threading.Event()
        self._ids = itertools.count(100)
        self._jobs_lock = threading.Lock()

    # -- the test's hands -------------------------------------------------------------------------

    def start(self, job_id: str) -> None:
        self.jobs[job_id].state, self.jobs[job_id].why = "RUNNING", None

    def attach(self, job_id: str) -> str:
        """Start the job and attach its worker; returns the machine name."""
        self.start(job_id)
        job = self.jobs[job_id]
        name = self.profiles[job.profile].machine_name(job_id)
        self.attached.add(name)
        return name

    def end(self, job_id: str, state: str = "COMPLETED") -> None:
        job = self.jobs[job_id]
        job.state, job.why = state, None
        self.attached.discard(self.profiles[job.profile].machine_name(job_id))

    def purge(self, job_id: str) -> None:
        self.jobs[job_id].purged = True

    # -- the backend ------------------------------------------------------------------------------

    def _submit(self, profile: SlurmProfile, request: MachineRequest) -> str:
        if self.gate is not None:
            self.at_gate.set()
            opened = self.gate.wait(GATE_LIMIT_S)
            self.at_gate.clear()
            if not opened:
                raise ProvisionError(f"the test never opened the gate (waited {GATE_LIMIT_S:g}s)")
        if profile.name in self.refuse:
            raise ProvisionError(self.refuse[profile.name])
        with self._jobs_lock:
            job_id = str(next(self._ids))
            self.jobs[job_id] = FakeJob(job_id, profile.name, request.reason)
        return job_id

    def _states(self, profile: SlurmProfile, job_ids: list[str]) -> dict[str, JobState]:
        if self.unreachable is not None:
            raise ProvisionError(self.unreachable)
        return {i: JobState(self.jobs[i].state, self.jobs[i].why) for i in job_ids
                if i in self.jobs and not self.jobs[i].purged}

    def _settle(self, profile: SlurmProfile, request: MachineRequest) -> None:
        self.settled.append(request.id)

    def _cancel(self, profile: SlurmProfile, job_id: str) -> None:
        self.cancelled.append(job_id)
        job = self.jobs.get(job_id)
        if job is not None and job.state not in ("COMPLETED", "FAILED", "CANCELLED"):
            job.state = "CANCELLED"
