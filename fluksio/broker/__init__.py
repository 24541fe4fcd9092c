"""The broker's side of an installation: how fluksio's processes reach Redis, and what they tell each other
through it outside Celery's task messages.

* :mod:`.connection` — first contact with the broker, and patience through an outage once connected;
* :mod:`.transport` — kombu's Redis transport, keeping one Redis client per channel;
* :mod:`.inbox` — a run's inbox (completions, wake-ups, cancels), one backend per module;
* :mod:`.events` — run and node events for watchers, one backend per module.

Kombu and redis-py are imported only by the Redis backends and the connection helpers, lazily where the
embedded default would otherwise load them.
"""
