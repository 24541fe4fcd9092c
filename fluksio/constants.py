"""Names shared across processes: Celery task names, queue names, key prefixes. Change them and old workers go deaf."""

#: The driver task; one message per run, on :data:`DRIVERS_QUEUE`.
DRIVE_TASK = "fluksio.drive"
#: The node-call task; Flower shows each call under its ``<flow>.<node>`` shadow name.
CALL_TASK = "fluksio.call"
#: The queue every driver worker consumes.
DRIVERS_QUEUE = "drivers"
#: The label of the queue for nodes that ask for no device: ``default@<machine>``.
DEFAULT_LABEL = "default"
