"""Inboxes as Redis lists, shared by every host: a message taken is kept on a *taken* list until the driver
is known to have it (see :meth:`RedisInbox.recover`)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from fluksio.broker.inbox.base import WAKE_UP, Inbox
from fluksio.constants import INBOX_KEY, TAKEN_SUFFIX
from fluksio.errors import ConfigError, MessageRefused
from fluksio.messages import InboxMessage, Wake, inbox_message_from_wire
from fluksio.placement.backend import Tell
from fluksio.security.signatures import Signer, is_envelope

log = logging.getLogger(__name__)


class RedisInbox(Inbox):
    """Inboxes as Redis lists: a completion pushed by a worker on any host waits there for its driver.

    Taking moves a message to the run's *taken* list in the same command (BLMOVE, or one script for a
    batch): if the connection drops before the reply arrives, redis-py sends the command again and the
    first message is not gone but on that list, where :meth:`recover` finds it. A message on the list
    that is not one fluksio sends (another version's, or anyone's who can write to the Redis) is logged
    and dropped as it is taken, never handed to the driver.

    With a ``signer`` (message signing on), every message pushed is signed for its run, and one taken that
    is unsigned, signed for another run, or signed by a certificate this process does not trust is dropped
    the same way (see fluksio/security/signatures.py).
    """

    #: An inbox nobody drains (its driver died and the run was never resumed) expires, in seconds.
    TTL_S = 7 * 24 * 3600
    #: How long a wake-up this process pushed is taken to be still on the inbox, in seconds.
    WAKE_PENDING_S = 1.0

    #: Take up to ARGV[1] messages off KEYS[1] and append them to the taken list KEYS[2], in one step.
    DRAIN_SCRIPT = """
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #items > 0 then
  redis.call('LTRIM', KEYS[1], #items, -1)
  redis.call('RPUSH', KEYS[2], unpack(items))
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
end
return items
"""

    def __init__(self, client: Any, signer: Signer | None = None) -> None:
        self.redis = client
        self.signer = signer
        self._drain = client.register_script(self.DRAIN_SCRIPT)
        #: How many messages each run's taken list held at the driver's previous check.
        self._taken_before: dict[str, int] = {}
        #: Runs whose taken list was given its expiry by this process (once per run, not per message).
        self._expiring: set[str] = set()
        #: Runs with a wake-up from this process still on their inbox, and when it was pushed
        #: (``time.monotonic()``): a second one would only make their driver claim again for the same news
        #: (a wake-up says "try now", and one not yet taken still will).
        self._waking: dict[str, float] = {}

    @staticmethod
    def _keys(run_id: str) -> tuple[str, str]:
        return INBOX_KEY + run_id, INBOX_KEY + run_id + TAKEN_SUFFIX

    def push(self, run_id: str, message: InboxMessage) -> None:
        push = self.tell(run_id, message)
        pipe = self.redis.pipeline(transaction=False)
        pipe.rpush(push.key, push.text)
        pipe.expire(push.key, push.ttl_s)
        pipe.execute()

    def tell(self, run_id: str, message: InboxMessage) -> Tell:
        text = json.dumps(message.to_wire())
        return Tell(INBOX_KEY + run_id, text if self.signer is None else self.signer.seal(run_id, text), self.TTL_S)

    def wake(self, run_id: str) -> None:
        now = time.monotonic()
        # Trusted for a moment only: a wake-up taken where this process cannot see it (by another process,
        # or onto the taken list by a command whose reply was lost) must not silence the run for good.
        if now - self._waking.get(run_id, -self.WAKE_PENDING_S) < self.WAKE_PENDING_S:
            return
        self._waking[run_id] = now
        try:
            self.push(run_id, WAKE_UP)
        except BaseException:
            self._waking.pop(run_id, None)
            raise

    def _taken(self, run_id: str, message: InboxMessage | None) -> InboxMessage | None:
        # Forgotten once taken, before the driver acts on it: a change after this point wakes it again.
        if isinstance(message, Wake):
            self._waking.pop(run_id, None)
        return message

    def pop(self, run_id: str, timeout: float) -> InboxMessage | None:
        key, taken = self._keys(run_id)
        if timeout <= 0:
            raw = self._needs_62(self.redis.lmove, key, taken, "LEFT", "RIGHT")
        else:
            # BLMOVE's timeout is in seconds and takes fractions. 0 would mean "forever".
            raw = self._needs_62(self.redis.blmove, key, taken, max(timeout, 0.001), "LEFT", "RIGHT")
        if raw is None:
            return None
        if run_id not in self._expiring:
            # BLMOVE made the list without an expiry: were the driver to die now and the run never be
            # resumed, nothing else would ever remove it.
            self.redis.expire(taken, self.TTL_S)
            self._expiring.add(run_id)
        return self._taken(run_id, self._read(run_id, raw))

    def drain(self, run_id: str, limit: int) -> list[InboxMessage]:
        messages = self._read_all(run_id, self._drain(keys=self._keys(run_id), args=[limit, self.TTL_S]))
        for message in messages:
            self._taken(run_id, message)
        return messages

    def recover(self, run_id: str) -> list[InboxMessage]:
        return self._read_all(run_id, self.redis.lrange(self._keys(run_id)[1], 0, -1))

    def _read_all(self, run_id: str, raws: list[bytes]) -> list[InboxMessage]:
        return [message for raw in raws if (message := self._read(run_id, raw)) is not None]

    def _read(self, run_id: str, raw: bytes) -> InboxMessage | None:
        try:
            data = json.loads(raw)
            if self.signer is not None:
                data = json.loads(self.signer.open(run_id, data))
            elif is_envelope(data):
                raise MessageRefused("a signed message, and this process checks no signatures: give it the "
                                     "installation's FLUKSIO_SIGNING_KEY, _CERTIFICATE and _CERT_STORE")
            return inbox_message_from_wire(data)
        except (ValueError, MessageRefused) as exc:  # ValueError: not JSON at all
            log.error("run %s: dropping a message on its inbox that fluksio did not send: %s", run_id, exc)
            return None

    def forget_taken(self, run_id: str) -> None:
        taken = self._keys(run_id)[1]
        pipe = self.redis.pipeline(transaction=True)
        # Messages are only ever appended to the taken list: the first ones are the oldest.
        pipe.ltrim(taken, self._taken_before.get(run_id, 0), -1)
        pipe.expire(taken, self.TTL_S)
        pipe.llen(taken)
        left = self._taken_before[run_id] = pipe.execute()[-1]
        if not left:  # trimmed empty, the list is gone: the next take makes it anew, without an expiry
            self._expiring.discard(run_id)

    def leave(self, run_id: str) -> None:
        self._taken_before.pop(run_id, None)
        self._expiring.discard(run_id)
        self._waking.pop(run_id, None)

    def close(self, run_id: str) -> None:
        self.leave(run_id)
        self.redis.delete(*self._keys(run_id))

    def _needs_62(self, command: Any, *args: Any) -> Any:
        """``command(*args)``, saying which Redis version is needed when the server does not know it."""
        from redis import ResponseError  # here: the embedded default never loads redis-py

        try:
            return command(*args)
        except ResponseError as exc:
            if "unknown command" not in str(exc).lower():
                raise
            version = self.redis.info("server").get("redis_version", "unknown")
            raise ConfigError(f"the broker's Redis is version {version}, and fluksio needs 6.2 or newer "
                              f"(BLMOVE): {exc}") from None
