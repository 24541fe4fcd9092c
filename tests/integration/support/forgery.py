"""Calls forged as someone with access to the broker would send them: a Celery app of their own, a grant held
for the call as its driver would (so that only the worker's own checks can stop it), and the call message."""

from __future__ import annotations

from celery import Celery

from tests.integration.support.cluster import Cluster


def celery_app(cluster: Cluster, serializer: str) -> Celery:
    app = Celery("forger", broker=cluster.redis.url, set_as_current=False)
    app.conf.update(task_serializer=serializer, accept_content=[serializer], broker_connection_retry_on_startup=True)
    return app


def arm_call(cluster: Cluster, call_id: str) -> dict:
    """Hold a grant for the call on the installation's machine, as its driver would, so that only the worker's
    own checks can stop it. Returns the grant as a call message carries it."""
    import redis

    from fluksio.placement.placer import Placer, Request, Waiting
    from fluksio.placement.redis import RedisBooks
    from fluksio.schemas import Resources

    books = RedisBooks(redis.Redis.from_url(cluster.redis.url), heartbeat_ttl_s=10)
    grant = Placer(books).try_claim(Request(call_id, Resources(cpus=1)))
    assert not isinstance(grant, Waiting), grant
    return grant.model_dump(mode="json")


def forged_call(flow: str, node: str, call_id: str, inputs: dict, grant: dict) -> dict:
    return {"call_id": call_id, "run_id": "01FORGEDRUN0000000000000000"[:26], "flow": flow, "node": node,
            "attempt": 1, "inputs": inputs, "grant": grant}
