"""Workers: the Celery app, the embedded in-process workers and (in distributed mode) `fluksio worker`."""
