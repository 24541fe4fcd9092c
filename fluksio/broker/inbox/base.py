"""The inbox interface: what a driver takes from, and what workers, cancels and wake-ups push to."""

from __future__ import annotations

from abc import ABC, abstractmethod

from fluksio.messages import InboxMessage, Wake
from fluksio.placement.backend import Tell


class Inbox(ABC):
    """One queue of messages per run, for the run's driver: completions, wake-ups and cancel requests.

    Invariants: a message pushed is kept until a driver takes it (a busy driver loses nothing);
    messages of one run are taken in the order they were pushed; an inbox is dropped (``close``) only
    by the driver that owns the run, once the run is over for it.
    """

    @abstractmethod
    def push(self, run_id: str, message: InboxMessage) -> None: ...

    def tell(self, run_id: str, message: InboxMessage) -> Tell | None:
        """The push of ``message`` as books in the same Redis send it on after a give-back (``Books.tells``);
        ``None`` for an inbox they cannot reach."""
        return None

    @abstractmethod
    def pop(self, run_id: str, timeout: float) -> InboxMessage | None:
        """The next message for the run, waiting up to ``timeout`` seconds; ``None`` when none came."""

    @abstractmethod
    def drain(self, run_id: str, limit: int) -> list[InboxMessage]:
        """Up to ``limit`` messages already waiting for the run, oldest first, without waiting for more.

        A driver that took one completion takes the others that came meanwhile, and handles them in one go.
        """

    @abstractmethod
    def close(self, run_id: str) -> None:
        """Drop the run's inbox once its driver is done with it."""

    def leave(self, run_id: str) -> None:
        """Stop using the run's inbox without removing it: another driver has the run now."""

    def recover(self, run_id: str) -> list[InboxMessage]:
        """Messages taken off the inbox lately, oldest first: those whose reply never reached the driver are
        among them. Called when a call's completion is overdue; the caller skips what it has handled already.
        """
        return []

    def forget_taken(self, run_id: str) -> None:
        """Forget what was taken before the previous call of this (the driver has long handled it).

        Called once per check of the calls in flight, so :meth:`recover` always sees at least the messages
        taken since the check before last.
        """

    def wake(self, run_id: str) -> None:
        self.push(run_id, WAKE_UP)


#: Wake-ups carry nothing: one object serves them all.
WAKE_UP = Wake()
