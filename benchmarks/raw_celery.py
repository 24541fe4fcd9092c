"""The raw-Celery baseline: one no-op task, as a Celery user would write it by hand.

``celery -A benchmarks.raw_celery worker`` runs it against ``RAW_CELERY_BROKER`` (a Redis database
of the same server fluksio uses, so the two never share a queue). Settings are Celery's defaults
except JSON (fluksio's only serializer) and a result backend on the same Redis, which ``chain``
and ``group`` need to hand back their results.
"""

from __future__ import annotations

import os

from celery import Celery


def make_app(broker_url: str, backend_url: str | None = None, **overrides: object) -> Celery:
    app = Celery("rawbench", broker=broker_url, backend=backend_url or broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json", result_serializer="json", accept_content=["json"],
        result_accept_content=["json"], broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False, **overrides,
    )

    @app.task(name="rawbench.noop", shared=False)
    def noop(previous: int | None = None) -> int:
        return 0

    return app


app = make_app(os.environ.get("RAW_CELERY_BROKER", "redis://127.0.0.1:6379/1"))
