"""The provisioner interface: start a machine on demand, and say what became of the request.

A provisioner owns a list of profiles (machine shapes a cluster can start). The
placer counts their :meth:`~Provisioner.shapes` when clamping; a driver whose
node waits for a shape a profile :meth:`~Provisioner.covers` calls
:meth:`~Provisioner.request`, which submits at most one job per profile at a
time; :meth:`~Provisioner.poll` (every few seconds, see :class:`Poller`) notices
the job's worker attaching, the job ending, or the attach timeout passing (then
the job is cancelled, and the request's outcome says why, for the waiting run's
reason). :meth:`~Provisioner.shutdown` cancels what this process asked for and
is still outstanding. Whenever a request stops waiting (attached, ended), the
backend's ``_settle`` hook removes what only a job yet to start needed.

:meth:`~Provisioner.request` never waits for the cluster: it reserves the
profile and returns, and the submission runs on the provisioner's own thread
(submitter.py), so a slow login node cannot hold a driver's loop (and its
run's lease) up.

The bookkeeping lives here; a backend (Slurm, the in-memory fake) only submits,
reads job states and cancels.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from fluksio.errors import ProvisionError
from fluksio.placement.clamp import fits
from fluksio.provisioners.config import SlurmProfile
from fluksio.provisioners.jobs import JobState
from fluksio.provisioners.request import MachineRequest, RequestState
from fluksio.provisioners.store import MemoryRequestStore, RequestStore
from fluksio.provisioners.submitter import Submitter
from fluksio.schemas import Resources

log = logging.getLogger(__name__)

#: After a request failed or timed out, its profile is not asked again for this long, in seconds, so a
#: job that can never start is not resubmitted in a loop; meanwhile :meth:`Provisioner.request` returns
#: the ended request, whose outcome says why.
RETRY_AFTER_S = 60.0
#: ``is_attached(machine_name)``: whether a worker of that name is attached (its heartbeat key exists).
AttachedCheck = Callable[[str], bool]
#: ``listener(request)``: a submission finished (the request has its job id, or failed); see
#: :meth:`Provisioner.add_listener`.
SubmissionListener = Callable[[MachineRequest], None]


class Provisioner(ABC):
    """Machines on demand for a list of profiles. Thread-safe; one per process."""

    #: What ``status()`` and messages call this kind of provisioner.
    kind = "slurm"
    #: How long :meth:`shutdown` waits for a submission in flight to return (and its job to be
    #: cancelled), in seconds: a backend sets it to the sum of its commands' time limits.
    submission_limit_s = 60.0

    def __init__(self, profiles: Sequence[SlurmProfile], store: RequestStore | None = None,
                 is_attached: AttachedCheck | None = None, *, clock: Callable[[], float] = time.time,
                 retry_after_s: float = RETRY_AFTER_S, owner: str | None = None) -> None:
        self.profiles: dict[str, SlurmProfile] = {p.name: p for p in profiles}
        self.store = store if store is not None else MemoryRequestStore()
        self.is_attached: AttachedCheck = is_attached if is_attached is not None else (lambda name: False)
        self.clock = clock
        self.retry_after_s = retry_after_s
        #: Names this process's requests, so shutting down cancels only what it asked for.
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._submitter = Submitter(self._submit_reserved)
        self._listeners: list[SubmissionListener] = []
        #: Set by :meth:`shutdown`; read with the lock below by a submission recording its job id, so a
        #: job id is either recorded before shutdown looks at the store (and cancelled by it) or not at
        #: all (and cancelled by the submission).
        self._stopping = False
        self._stopping_lock = threading.Lock()

    # -- what the placer asks ---------------------------------------------------------------------

    def shapes(self) -> list[tuple[Resources, tuple[str, ...]]]:
        """Every profile's shape and labels: the placer counts them when clamping."""
        return [(p.shape, p.labels) for p in self.profiles.values()]

    def covers(self, resources: Resources, device: str | None = None) -> SlurmProfile | None:
        """The smallest profile whose machine could take ``resources`` and carries ``device``, if any.

        Pass the request as the placer would grant it (after clamping): a request larger than every
        profile is covered by none.
        """
        fitting = [p for p in self.profiles.values()
                   if (device is None or device in p.labels) and fits(resources, p.shape)]
        order = {name: i for i, name in enumerate(self.profiles)}
        return min(fitting, key=lambda p: (p.gpus, p.cpus, p.ram_mb, order[p.name]), default=None)

    def carries(self, label: str) -> bool:
        """Whether some profile's machine would carry ``label``."""
        return any(label in p.labels for p in self.profiles.values())

    def profile(self, name: str) -> SlurmProfile:
        try:
            return self.profiles[name]
        except KeyError:
            raise ProvisionError(f"no provisioner profile named {name!r} (known: "
                                 f"{', '.join(self.profiles) or 'none'})") from None

    # -- requests ---------------------------------------------------------------------------------

    def request(self, profile: SlurmProfile | str, reason: str) -> MachineRequest:
        """Ask for a machine of ``profile``, unless one is already being asked for: then that request.

        Returns at once, without waiting for the cluster: a new request is reserved in the store
        (``pending``, no job id yet; its :meth:`~MachineRequest.describe` says it is being submitted)
        and submitted on the provisioner's thread. Once the cluster answered, the request has its job
        id, or it is ``failed``, its outcome says why, and the profile is not asked again for
        ``retry_after_s``. Never raises for a cluster that refuses or cannot be reached.

        A waiting driver sees the answer when it asks again: on its next placement attempt, which the
        listeners (:meth:`add_listener`; a driver worker's :class:`Poller` publishes a placer change)
        trigger as soon as the submission finishes, and at the latest each lease interval.
        """
        profile = self.profile(profile if isinstance(profile, str) else profile.name)
        now = self.clock()
        outstanding = self.store.outstanding(profile.name)
        if outstanding is not None:
            return outstanding
        last = self.store.last(profile.name)
        if last is not None and last.hold_until is not None and now < last.hold_until:
            return last
        fresh = MachineRequest(id=uuid.uuid4().hex, profile=profile.name, reason=reason, owner=self.owner,
                               submitted_at=now)
        held = self.store.reserve(fresh)
        if held is not None:
            return held  # another driver reserved the profile a moment ago
        if not self._submitter.put(fresh):  # shut down a moment ago: free the profile for other drivers
            ended = self._shut_down(profile, fresh)
            self.store.update(ended)
            return ended
        return fresh

    def join_submissions(self, timeout_s: float | None = None) -> bool:
        """Wait until the submissions asked for so far have returned (at most ``timeout_s`` seconds;
        ``None``: as long as it takes). Returns whether they have. For callers that need the job id
        now (tests); a driver never waits."""
        return self._submitter.join(timeout_s)

    def add_listener(self, listener: SubmissionListener) -> None:
        """Call ``listener(request)`` when a submission of this process finishes (on the submitting
        thread, no lock held): e.g. to wake drivers whose run's reason should now name the job."""
        self._listeners.append(listener)

    def remove_listener(self, listener: SubmissionListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _submit_reserved(self, request: MachineRequest) -> None:
        """Submit a reserved request and record what became of it (on the submitting thread)."""
        profile = self.profiles[request.profile]
        try:
            job_id = self._submit(profile, request)
        except Exception as exc:  # ProvisionError, said in words; anything else is a bug, logged in full
            failed = request.model_copy(update=self._held_off({
                "state": RequestState.FAILED,
                "outcome": f"could not submit a Slurm job for profile {profile.name!r}: {exc}",
            }))
            log.warning("%s", failed.outcome, exc_info=not isinstance(exc, ProvisionError))
            # Not written when the request ended meanwhile (given up, or shut down): nothing to undo.
            if self.store.update(failed):
                self._tell(failed)
            return
        submitted = request.model_copy(update={
            "job_id": job_id, "machine": profile.machine_name(job_id), "output": self.output_of(profile, job_id),
        })
        with self._stopping_lock:
            try:
                recorded = not self._stopping and self.store.update(submitted)
            except Exception:  # a job nobody can find in the store would never be polled nor cancelled
                log.warning("could not record Slurm job %s of profile %s; cancelling it", job_id, profile.name,
                            exc_info=True)
                recorded = False
        if not recorded:
            # Ended meanwhile: by another process (it judged the submission stale), or this one shut
            # down while sbatch ran. Either way, do not leave a job behind.
            log.info("cancelling Slurm job %s of profile %s: its request ended while it was submitted", job_id,
                     profile.name)
            self._cancel_quietly(profile, job_id)
            self._settle(profile, submitted)
            return
        log.info("submitted Slurm job %s for profile %s (%s)", job_id, profile.name, request.reason)
        self._tell(submitted)

    def _tell(self, request: MachineRequest) -> None:
        for listener in list(self._listeners):
            try:
                listener(request)
            except Exception:  # a listener away (Redis) must not stop the next submission
                log.warning("a submission listener failed", exc_info=True)

    def current(self, profile: SlurmProfile | str) -> MachineRequest | None:
        """The profile's outstanding request, else its most recently ended one (for a waiting run's reason)."""
        name = profile if isinstance(profile, str) else profile.name
        return self.store.outstanding(name) or self.store.last(name)

    def poll(self) -> list[MachineRequest]:
        """Look at every live request once: attached, ended, or timed out (then cancel it). Returns what changed."""
        with self._lock:  # one poll at a time per process; other processes are kept apart by the store
            live = self.store.live()
            states = self._all_states(live)
            changed = []
            for request in live:
                profile = self.profiles.get(request.profile)
                if profile is None:
                    continue  # another installation's profile list knows it; leave it to them
                moved = self._advance(profile, request, states.get(request.id), answered=request.id in states)
                if moved is not None and moved != request and self.store.update(moved):
                    if request.state.is_outstanding() and not moved.state.is_outstanding():
                        self._settle(profile, moved)
                    if moved.state is not request.state:
                        changed.append(moved)
                        log.info("profile %s: %s", profile.name, moved.describe(self.clock()))
            return changed

    def shutdown(self, timeout_s: float | None = None) -> list[MachineRequest]:
        """Cancel every request this process made that is still outstanding (the driver worker is stopping).

        Returns those it ended. Submissions queued and not started are dropped. One in flight is ended
        in the store at once (other drivers stop waiting for it); when its ``sbatch`` returns, the job
        is cancelled and its credentials removed, as for a request ended meanwhile by another process.
        Since the process exits next (and the submitting thread with it), shutdown waits for that, at
        most ``timeout_s`` seconds (default :attr:`submission_limit_s`, which a backend sets to cover
        its commands' time limits), and warns if it returned too late.
        """
        self._submitter.close()
        with self._stopping_lock:
            self._stopping = True
        cancelled = []
        for request in self.store.live():
            if request.owner != self.owner or not request.state.is_outstanding():
                continue
            profile = self.profiles.get(request.profile)
            if profile is None:
                continue
            if request.job_id is not None:
                self._cancel_quietly(profile, request.job_id)
            ended = self._shut_down(profile, request)
            if self.store.update(ended):
                if request.job_id is not None:  # a submission in flight is settled once it returns
                    self._settle(profile, ended)
                cancelled.append(ended)
        in_flight = self._submitter.in_flight
        if not self._submitter.join(self.submission_limit_s if timeout_s is None else timeout_s) \
                and in_flight is not None:
            job = self.profiles[in_flight.profile].job_name if in_flight.profile in self.profiles else "?"
            log.warning("the Slurm submission for profile %s was still running at shutdown; if it went through, "
                        "its job (named %s) is left in the queue: cancel it with scancel", in_flight.profile, job)
        return cancelled

    def _shut_down(self, profile: SlurmProfile, request: MachineRequest) -> MachineRequest:
        """``request`` cancelled because this process shuts down (no hold-off: other drivers may ask at once)."""
        what = (f"Slurm job {request.job_id} (profile {profile.name!r})" if request.job_id is not None
                else f"the Slurm submission for profile {profile.name!r}")
        return request.model_copy(update={
            "state": RequestState.CANCELLED, "ended_at": self.clock(),
            "outcome": f"{what} was cancelled: the driver worker that asked for it shut down",
        })

    # -- visibility -------------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One row per live job, and one ``idle`` row per profile without one (for ``fluksio placer``).

        Each row: ``profile, kind, host, state`` (idle, pending, attached), ``job_id, job_state,
        job_reason, pending_s`` (since submission, while pending), ``machine, reason`` (why it was
        asked for), ``last`` (the outcome of the profile's last ended request, if any).
        """
        now = self.clock()
        live: dict[str, list[MachineRequest]] = {}
        for request in self.store.live():
            live.setdefault(request.profile, []).append(request)
        rows = []
        for profile in self.profiles.values():
            last = self.store.last(profile.name)
            base: dict[str, Any] = {"profile": profile.name, "kind": self.kind, "host": profile.host or "local",
                    "shape": profile.shape.model_dump(), "labels": list(profile.labels),
                    "last": last.outcome if last is not None else None}
            if not live.get(profile.name):
                rows.append({**base, "state": "idle", "job_id": None, "job_state": None, "job_reason": None,
                             "pending_s": None, "machine": None, "reason": None})
            for request in live.get(profile.name, []):
                pending = request.state.is_outstanding()
                rows.append({**base, "state": request.state.value, "job_id": request.job_id,
                             "job_state": request.job_state, "job_reason": request.job_reason,
                             "pending_s": round(now - request.submitted_at, 1) if pending else None,
                             "machine": request.machine, "reason": request.reason})
        return rows

    # -- the state machine ------------------------------------------------------------------------

    def _all_states(self, live: Iterable[MachineRequest]) -> dict[str, JobState | None]:
        """Request id → its job's state; ``None`` when the job is gone. Missing: the scheduler could not say."""
        by_profile: dict[str, list[MachineRequest]] = {}
        for request in live:
            if request.job_id is not None and request.profile in self.profiles:
                by_profile.setdefault(request.profile, []).append(request)
        states: dict[str, JobState | None] = {}
        for name, requests in by_profile.items():
            try:
                known = self._states(self.profiles[name], [r.job_id for r in requests if r.job_id])
            except ProvisionError as exc:
                log.warning("cannot read the state of profile %s's jobs: %s", name, exc)
                continue
            for request in requests:
                states[request.id] = known.get(request.job_id or "")
        return states

    def _advance(self, profile: SlurmProfile, request: MachineRequest, job: JobState | None,
                 answered: bool) -> MachineRequest | None:
        """The request's next state, given its job's (``answered``: the scheduler did answer; then a
        ``None`` job is gone). ``None``: nothing to write."""
        now = self.clock()
        if request.job_id is None:
            # Still being submitted; a submission that never finished (its process died, or sbatch outlasted
            # the attach timeout) is given up: if it returns after all, it cancels the job it got.
            if now - request.submitted_at > profile.attach_timeout_s:
                return request.model_copy(update=self._held_off({
                    "state": RequestState.FAILED,
                    "outcome": f"the Slurm submission for profile {profile.name!r} never finished"}))
            return None
        update: dict[str, Any] = {"checked_at": now}
        if job is not None:
            update |= {"job_state": job.state, "job_reason": job.reason}
        gone = answered and job is None
        ended = gone or (job is not None and job.ended)
        seen = "is no longer known to Slurm" if gone else f"ended ({job.state})" if job is not None else ""
        label = f"Slurm job {request.job_id} (profile {profile.name!r})"
        if request.state is RequestState.PENDING:
            if request.machine and self.is_attached(request.machine):
                return request.model_copy(update=update | {"state": RequestState.ATTACHED, "attached_at": now})
            if ended:
                where = f"; see its output {request.output}" if request.output else ""
                return request.model_copy(update=update | self._held_off({
                    "state": RequestState.FAILED, "outcome": f"{label} {seen} before its worker attached{where}"}))
            if now - request.submitted_at >= profile.attach_timeout_s:
                self._cancel_quietly(profile, request.job_id)
                state = update.get("job_state") or request.job_state
                why = update.get("job_reason") or request.job_reason
                told = (f"Slurm said: {state}, {why}" if why and why != "None" else f"Slurm said: {state}") \
                    if state else "its Slurm state could not be read"
                return request.model_copy(update=update | self._held_off({
                    "state": RequestState.CANCELLED,
                    "outcome": (f"{label} was cancelled: its worker did not attach within "
                                f"{profile.attach_timeout_s:g}s ({told})")}))
        elif request.state is RequestState.ATTACHED and ended:
            return request.model_copy(update=update | {
                "state": RequestState.FINISHED, "ended_at": now,
                "outcome": f"{label} {seen} after its worker ({request.machine}) attached"})
        return request.model_copy(update=update)

    def _held_off(self, update: dict[str, Any]) -> dict[str, Any]:
        """``update`` for a request that ended badly: its profile is not asked again for ``retry_after_s``."""
        now = self.clock()
        return {**update, "ended_at": now, "hold_until": now + self.retry_after_s}

    def _cancel_quietly(self, profile: SlurmProfile, job_id: str) -> None:
        try:
            self._cancel(profile, job_id)
        except ProvisionError as exc:
            log.warning("could not cancel Slurm job %s of profile %s: %s", job_id, profile.name, exc)

    # -- what a backend provides ------------------------------------------------------------------

    def _settle(self, profile: SlurmProfile, request: MachineRequest) -> None:
        """The request stopped waiting for its machine (its worker attached, or it ended without one):
        remove what only a job yet to start needs (the Slurm backend: the job's credentials file).

        Called once, by the process whose store update moved the request on; also for a submission that
        never finished. Never raises.
        """

    def output_of(self, profile: SlurmProfile, job_id: str) -> str | None:
        """Where the job's output goes (for messages); ``None`` when unknown."""
        return None

    @abstractmethod
    def _submit(self, profile: SlurmProfile, request: MachineRequest) -> str:
        """Submit one job for ``profile``; its id. Raises :class:`ProvisionError`."""

    @abstractmethod
    def _states(self, profile: SlurmProfile, job_ids: list[str]) -> dict[str, JobState]:
        """The state of each job still known to the scheduler (a job missing from the answer is gone)."""

    @abstractmethod
    def _cancel(self, profile: SlurmProfile, job_id: str) -> None:
        """Cancel the job (idempotent: a job that already ended is no error). Raises :class:`ProvisionError`."""
