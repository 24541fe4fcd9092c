"""Executing node calls: the Celery task, output encoding and log capture."""
