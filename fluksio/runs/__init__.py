"""Run semantics above the store: submit (validation, references, seeds, idempotency), parents and their
child runs, the lease sweeper, run ends told in this process, and the metric sink."""
