"""The driver: the pure graph walk and the task that drives a run."""
