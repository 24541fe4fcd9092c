"""Watching a provisioner: its requests polled on a thread of their own, changes told to a callback."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from fluksio.provisioners.base import Provisioner
from fluksio.provisioners.request import MachineRequest

log = logging.getLogger(__name__)


class Poller:
    """Calls :meth:`Provisioner.poll` every ``interval_s`` seconds on a daemon thread, until stopped.

    ``on_change`` receives the requests whose state changed (e.g. to wake drivers whose run's reason
    should now say a job was cancelled), and each request whose submission just finished (it has its
    job id now, or failed); it is called with no lock held.
    """

    def __init__(self, provisioner: Provisioner, interval_s: float = 5.0,
                 on_change: Callable[[list[MachineRequest]], None] | None = None) -> None:
        self.provisioner = provisioner
        self.interval_s = interval_s
        self.on_change = on_change
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fluksio-provisioner-poll", daemon=True)

    def start(self) -> Poller:
        self.provisioner.add_listener(self._submitted)
        self._thread.start()
        return self

    def _submitted(self, request: MachineRequest) -> None:
        if self.on_change is not None:
            self.on_change([request])

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                changed = self.provisioner.poll()
                if changed and self.on_change is not None:
                    self.on_change(changed)
            except Exception:  # Redis or the cluster away for a moment: the next poll tries again
                log.warning("polling the provisioner failed", exc_info=True)

    def stop(self) -> None:
        self.provisioner.remove_listener(self._submitted)
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.interval_s + 5)
