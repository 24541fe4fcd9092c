"""Run and node events (``node_queued`` with its reason, …) on one channel, for watchers and dashboards.

Events are for people watching; the run store stays the truth. A lost event
loses nothing but a line on someone's screen.

One backend per module: :mod:`.base` (the interface), :mod:`.memory` (one
process's subscribers) and :mod:`.redis` (a channel every host sees).
"""
