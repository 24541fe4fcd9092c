"""Names shared across processes: Celery task names, queue names, key prefixes. Change them and old workers go deaf."""

#: The driver task; one message per run, on :data:`DRIVERS_QUEUE`.
DRIVE_TASK = "fluksio.drive"
#: The node-call task; Flower shows each call under its ``<flow>.<node>`` shadow name.
CALL_TASK = "fluksio.call"
#: The queue every driver worker consumes.
DRIVERS_QUEUE = "drivers"
#: The label of the queue for nodes that ask for no device: ``default@<machine>``.
DEFAULT_LABEL = "default"
#: Longest name of a flow, node, message or label: they are stored in columns of this width (and read by people).
MAX_NAME_LENGTH = 200

#: Every Redis key fluksio writes starts with this, so an installation can share a Redis database.
KEY_PREFIX = "fluksio:"
#: SET of attached machine names.
MACHINES_KEY = KEY_PREFIX + "machines"
#: STRING counter, INCRed whenever a machine attaches or leaves: placers cache inventories until it moves.
MACHINES_GENERATION_KEY = KEY_PREFIX + "machines-generation"
#: ZSET machine name → its rank in the placer's preference (labelled ones + 2, then cpus in use / cpus).
MACHINES_BY_LOAD_KEY = KEY_PREFIX + "machines-by-load"
#: HASH grant id → the machine holding it, so that a retried claim finds the grant it already has.
GRANT_MACHINE_KEY = KEY_PREFIX + "grant-machine"
#: HASH of a machine's inventory and free resources: ``MACHINE_KEY + name``.
MACHINE_KEY = KEY_PREFIX + "machine:"
#: HASH grant id → grant, per machine: ``GRANTS_KEY + name``.
GRANTS_KEY = KEY_PREFIX + "grants:"
#: A machine's heartbeat; it expires when the worker stops refreshing it: ``HEARTBEAT_KEY + name``.
HEARTBEAT_KEY = KEY_PREFIX + "heartbeat:"
#: HASH call id → why it waits.
WAITING_KEY = KEY_PREFIX + "waiting"
#: HASH call id → when its driver last said it still waits (seconds since the epoch).
WAITING_SEEN_KEY = KEY_PREFIX + "waiting-seen"
#: HASH kind id → what the waiting calls of that kind ask for (JSON), for every kind with a call waiting.
WAIT_KINDS_KEY = KEY_PREFIX + "wait-kinds"
#: ZSET (all scores 0) of the order keys of one kind's waiting calls, sorted bytewise: ``WAIT_KIND_KEY + id``.
WAIT_KIND_KEY = KEY_PREFIX + "wait-kind:"
#: STRING, set while some claim was refused for a call ahead of it: the next such call granted wakes everyone.
HELD_BACK_KEY = KEY_PREFIX + "held-back"
#: HASH grant id → machine, of the grants holding a slot of one pool: ``POOL_KEY + name``.
POOL_KEY = KEY_PREFIX + "pool:"
#: Pub/sub channel announcing every give-back and attach, so waiting drivers wake.
CHANGES_CHANNEL = KEY_PREFIX + "placer-changes"
#: LIST of messages for a run's driver: ``INBOX_KEY + run_id``.
INBOX_KEY = KEY_PREFIX + "inbox:"
#: LIST of what a run's driver took off its inbox lately: ``INBOX_KEY + run_id + TAKEN_SUFFIX``.
TAKEN_SUFFIX = ":taken"
#: Pub/sub channel of run and node events.
EVENTS_CHANNEL = KEY_PREFIX + "events"
#: STRING: id of a profile's outstanding machine request: ``PROVISION_SLOT_KEY + profile``.
PROVISION_SLOT_KEY = KEY_PREFIX + "provision:slot:"
#: HASH request id → request, for every live (pending or attached) machine request.
PROVISION_LIVE_KEY = KEY_PREFIX + "provision:live"
#: STRING: a profile's most recently ended machine request: ``PROVISION_LAST_KEY + profile``.
PROVISION_LAST_KEY = KEY_PREFIX + "provision:last:"
#: STRING per signing process (``SIGNER_KEY + "nodes@box1"``): JSON of the certificate it signs with and those
#: it trusts, refreshed while it runs and expiring after it: how a worker learns at start who would refuse it.
SIGNER_KEY = KEY_PREFIX + "signer:"
