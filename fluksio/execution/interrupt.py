"""Stopping a node call that runs on a thread (the embedded default), as far as Python allows.

A thread cannot be killed. What can be done: raise :class:`CallCancelled` in
it at its next Python instruction, which ends loops and most work at once. A
call blocked inside C (``time.sleep``, a socket read) notices when that
returns; meanwhile its run has ended and its resources are given back. Calls in
the distributed mode run in processes and are killed outright.
"""

from __future__ import annotations

import ctypes
import threading


class CallCancelled(BaseException):
    """Raised inside a node call whose run was cancelled. A BaseException, so ``except Exception`` lets it by."""


_threads: dict[str, int] = {}
_lock = threading.Lock()


def running(call_id: str) -> None:
    """The calling thread now runs ``call_id``."""
    with _lock:
        _threads[call_id] = threading.get_ident()


def finished(call_id: str) -> None:
    """The calling thread no longer runs ``call_id``: from now on, it cannot be interrupted for it."""
    with _lock:
        _threads.pop(call_id, None)


def interrupt(call_id: str) -> bool:
    """Raise :class:`CallCancelled` in the thread running ``call_id``; whether one was running it.

    Under the lock, so that a thread that has just finished the call (and may be starting another) is
    never hit by an exception meant for this one.
    """
    with _lock:
        ident = _threads.pop(call_id, None)
        if ident is None:
            return False
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(CallCancelled))
        return True
