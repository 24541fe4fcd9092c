"""One request for a machine: what was asked of a cluster, why, and what became of it. Pure."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class RequestState(StrEnum):
    #: Submitted (or being submitted); its worker has not attached yet. At most one per profile.
    PENDING = "pending"
    #: Its worker dialled back; the job runs until that worker has been idle for the profile's idle timeout.
    ATTACHED = "attached"
    #: The job ended after its worker attached (normally: the worker was idle and exited).
    FINISHED = "finished"
    #: Cancelled: its worker did not attach in time, or the driver worker that asked for it shut down.
    CANCELLED = "cancelled"
    #: The cluster refused it, or its job ended before its worker attached.
    FAILED = "failed"

    def is_live(self) -> bool:
        """Whether the job may still be in the cluster (so it is polled)."""
        return self in (RequestState.PENDING, RequestState.ATTACHED)

    def is_outstanding(self) -> bool:
        """Whether the request still waits for its machine (so no second one is made for the profile)."""
        return self is RequestState.PENDING


class MachineRequest(BaseModel):
    """One job asked of a cluster for one profile. Times are epoch seconds (shared by processes and hosts)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    profile: str
    #: Why it was asked for, in words (e.g. "run 1a2b node fit waits for a worker labelled 'cluster'").
    reason: str
    #: The provisioner (one per process) that asked; only it cancels the request when it shuts down.
    owner: str
    state: RequestState = RequestState.PENDING
    submitted_at: float
    #: The cluster's job id; ``None`` while the submission is in flight (the request is reserved, and
    #: ``sbatch`` has not answered yet).
    job_id: str | None = None
    #: The name its worker attaches under (``slurm-<profile>-<job id>``).
    machine: str | None = None
    #: Where the job writes its output, for the messages that say where to look.
    output: str | None = None
    #: The scheduler's last word on the job (Slurm's ``%T``: PENDING, RUNNING …), and why (``%r``).
    job_state: str | None = None
    job_reason: str | None = None
    checked_at: float | None = None
    attached_at: float | None = None
    ended_at: float | None = None
    #: Why it ended, in words a user reads (set for cancelled, failed and finished requests).
    outcome: str | None = None
    #: The profile is not asked again before this: set when the request failed or timed out, so a job that
    #: can never start is not resubmitted in a loop (a request cancelled at shutdown holds nothing off).
    hold_until: float | None = None

    def describe(self, now: float) -> str:
        """What the request is doing, for a waiting run's reason and ``fluksio placer``."""
        if not self.state.is_live():
            return self.outcome or f"Slurm job {self.job_id} (profile {self.profile!r}) {self.state.value}"
        waited = max(0.0, now - self.submitted_at)
        if self.job_id is None:  # reserved; sbatch (through ssh, perhaps) has not answered yet
            return (f"submitting a Slurm job for profile {self.profile!r} "
                    f"(waiting for sbatch's answer for {waited:.0f}s)")
        if self.state is RequestState.ATTACHED:
            return f"Slurm job {self.job_id} (profile {self.profile!r}) is attached as {self.machine}"
        seen = self.job_state or "submitted"
        why = f", {self.job_reason}" if self.job_reason and self.job_reason != "None" else ""
        return f"asked Slurm for a machine: job {self.job_id} (profile {self.profile!r}) {seen}{why} for {waited:.0f}s"
