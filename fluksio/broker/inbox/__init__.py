"""A driver's inbox: node completions, wake-ups and cancel requests for one run.

Workers push a completion here when a call ends, so the driver never polls a
result backend. An inbox keeps messages until they are taken: a completion
pushed while its driver is busy is not lost. On Redis, what the driver takes
is also moved to a *taken* list, so a message whose reply was lost on the way
(a dropped connection) can still be read back: see :meth:`.base.Inbox.recover`.

One backend per module, as kombu keeps one per transport: :mod:`.base` (the
interface), :mod:`.memory` (the embedded default's in-process queues) and
:mod:`.redis` (lists every host shares).
"""
