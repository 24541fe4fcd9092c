"""A node call on a worker: the Celery task, admitting and settling a call (each one round trip to Redis),
running its function here or in a child on its GPUs (forked from a warm fork server), capturing its
output and encoding its values."""
