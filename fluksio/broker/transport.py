"""kombu's Redis transport, with one Redis client per channel for its commands instead of one per command.

kombu's Redis channel makes a new ``redis.Redis`` for each command it sends outside its consumer's own
connection: every message published, every acknowledgement, every message a worker takes (its
unacknowledged-message bookkeeping). The connection comes from the channel's pool either way; the client
object is what is new, and redis-py builds one in about 150 µs of CPU (its response callbacks, its
argument checks) on this project's standard machine: three per call of a chain (the driver's send, the
worker's bookkeeping and its acknowledgement), about 7 % of a driver process's CPU in a sweep of short runs
(``benchmarks/many_runs.py``). A client of redis-py is safe to share between threads, so a channel keeps
one, and makes it again when kombu replaces the channel's pool (after a fork, or on close).

fluksio's apps use this transport for ``redis://`` and ``rediss://`` brokers (``BrokerConnection`` in
``fluksio/worker/app.py``); the URL, its TLS options and every other setting are read as kombu reads them.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _commands_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the consumer's own connection (BRPOP, pub/sub): kombu caches it already
            return super()._create_client(asynchronous=True)
        pool = self.pool
        client = self._commands_client
        if client is None or client.connection_pool is not pool:
            client = self._commands_client = super()._create_client(asynchronous=False)
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel
