"""Provisioners: machines started on demand (a Slurm batch job whose payload is a ``fluksio worker``).

For the driver side::

    profiles = load_profiles(path)                       # ConfigError naming file, profile and field
    provisioner = create_provisioner(profiles, settings, RedisRequestStore(redis_client),
                                     is_attached=lambda name: redis_client.exists(HEARTBEAT_KEY + name))
    Placer(books, provisioner_shapes=provisioner.shapes())
    profile = provisioner.covers(resources, device)      # when a node waits: can a profile take it?
    request = provisioner.request(profile, reason)       # idempotent per profile; request.describe(now);
                                                         # returns at once, sbatch runs on a thread of its own
    poller = Poller(provisioner, interval_s=2.0, on_change=...).start()   # submitted / attach / timeout / end
    provisioner.status()                                 # rows for `fluksio placer`
    poller.stop(); provisioner.shutdown()                # cancels this process's outstanding requests (and
                                                         # the job of a submission in flight, once it returns)
    provisioner.join_submissions(timeout_s)              # tests: wait for sbatch's answers
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fluksio.provisioners.base import AttachedCheck, Provisioner, ProvisionError
from fluksio.provisioners.config import (
    SlurmProfile,
    load_profiles,
    parse_profiles,
    profiles_path,
)
from fluksio.provisioners.jobs import JobState
from fluksio.provisioners.poller import Poller
from fluksio.provisioners.request import MachineRequest, RequestState
from fluksio.provisioners.store import MemoryRequestStore, RequestStore
from fluksio.settings import Settings

__all__ = [
    "AttachedCheck", "JobState", "MachineRequest", "MemoryRequestStore", "Poller", "ProvisionError",
    "Provisioner", "RequestState", "RequestStore", "SlurmProfile", "create_provisioner", "load_profiles",
    "parse_profiles", "profiles_path",
]


def create_provisioner(profiles: Sequence[SlurmProfile], settings: Settings, store: RequestStore | None = None,
                       is_attached: AttachedCheck | None = None, **kwargs: Any) -> Provisioner | None:
    """The provisioner for ``profiles`` (every kind is ``slurm`` today); ``None`` when there are none."""
    if not profiles:
        return None
    from fluksio.provisioners.slurm import SlurmProvisioner

    return SlurmProvisioner(profiles, settings, store, is_attached, **kwargs)
