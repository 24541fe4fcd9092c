"""Triggers: runs that start themselves (schedules fired by Celery beat) and alerts when runs end."""
