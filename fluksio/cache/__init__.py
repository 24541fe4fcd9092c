"""The run cache: the run history itself, looked up by what makes two node calls the same.

* :mod:`.keys` — a call's cache key (node identity, ports, code digest, input values); pure;
* :mod:`.lookup` — an earlier successful call under a key whose outputs are still whole;
* :mod:`.node_cache` — a run's keys (each worked out once) and lookups, as its driver uses them.

A cache that cannot answer is a miss, never a failed run.
"""
