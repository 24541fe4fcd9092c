"""A worker's heartbeat: refreshes its machine's key so drivers know it is alive."""

from __future__ import annotations

import logging
import threading

from fluksio.failures import reason
from fluksio.placement.redis import RedisBooks
from fluksio.schemas import Inventory

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, books: RedisBooks, inventory: Inventory, interval_s: float) -> None:
        self.books = books
        self.inventory = inventory
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="fluksio-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.books.heartbeat(self.inventory)
            except Exception as exc:  # Redis away for a moment (the outage is said already): the next beat tries again
                log.warning("heartbeat of %s failed: %s", self.inventory.name, reason(exc))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval_s + 1)
