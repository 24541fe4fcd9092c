"""Run semantics above the store: submit validation, the metric sink, driver inboxes, the shared runtime."""
