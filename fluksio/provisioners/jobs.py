"""What a cluster's scheduler says of a job, in its own words (Slurm's; the in-memory fake uses the same)."""

from __future__ import annotations

from dataclasses import dataclass

#: Job states after which a job no longer runs (Slurm's names; the fake uses the same).
ENDED_JOB_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "REVOKED", "SPECIAL_EXIT", "TIMEOUT",
})


@dataclass(frozen=True)
class JobState:
    """What the scheduler says of one job."""

    state: str
    #: Why it is in that state (Slurm's ``%r``: ``Resources``, ``JobHeldUser`` …), when it says.
    reason: str | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED_JOB_STATES
