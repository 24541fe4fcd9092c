"""Reproducible benchmarks of fluksio against raw Celery and peers; see BENCHMARKS.md."""
