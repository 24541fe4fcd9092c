"""One error tree: everything fluksio raises on purpose is a :class:`FluksioError`.

Messages say what was wrong and what to do about it, because they are read by
people at a terminal, not by code; :func:`first_line` is the line of an error
text that a one-line message quotes.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class FluksioError(Exception):
    """Base of every error fluksio raises on purpose."""


class FlowError(FluksioError):
    """A flow's graph or a node's declaration is wrong (caught at definition time)."""


class FlowNotFound(FluksioError):
    """A flow reference names no flow that can be loaded."""


class RunRejected(FluksioError, ValueError):
    """A submit was refused before anything was journaled."""


class RunNotFound(FluksioError, LookupError):
    """No run has that id (or id prefix)."""


class OutputNotFound(FluksioError, LookupError):
    """A run made no output of that name."""


class ConfigError(FluksioError):
    """Settings or a configuration file are invalid."""


class ArtifactError(FluksioError):
    """An artifact digest is malformed or its bytes are missing."""


class CodecError(FluksioError):
    """A value cannot be encoded or decoded by its codec, or the codec (or the package it needs) is missing."""


class NodeFailed(FluksioError):
    """A node call did not produce valid outputs. Raised inside node execution only.

    ``logs`` is what the call printed before it failed, reported with the error; ``error_types`` the names of
    the exception the node raised and its bases (for ``retry_on``), ``oom`` whether it ran out of memory.
    """

    def __init__(self, message: str, logs: str | None = None, error_types: tuple[str, ...] = (),
                 oom: bool = False) -> None:
        super().__init__(message)
        self.logs = logs
        self.error_types = error_types
        self.oom = oom


class MessageRefused(FluksioError):
    """A message from the broker (a node call, a completion) is not one this version of fluksio sends."""


class PlacementError(FluksioError):
    """A request can never be placed: it names a pool this installation does not have."""


class StoreUnavailable(FluksioError):
    """The run store could not be reached: when a process starts, or for longer than the outage bound."""


class CallNotStarted(FluksioError):
    """A node call's worker could not ask the run store or the placer's books whether the call may start
    (an outage past its bound): nothing ran and nothing was given back; its message goes back to its queue."""


class BrokerUnavailable(FluksioError):
    """The broker (Redis) could not be reached: when a process starts, or for longer than the outage bound.

    ``transient`` is false when waiting cannot help (a refused password, TLS, a server that is not Redis).
    """

    def __init__(self, message: str, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


class EventsUnavailable(BrokerUnavailable):
    """The broker did not confirm a subscription to the events channel in time."""


class ClientClosed(FluksioError):
    """A closed client was asked to do something (``connect()`` again for a new one)."""


class ProvisionError(FluksioError):
    """A cluster could not be asked for a machine (a command failed, timed out, or is missing)."""


class ScheduleRejected(FluksioError, ValueError):
    """A schedule was refused when it was added (a bad cron expression, time zone, flow or parameter)."""


class ScheduleNotFound(FluksioError, LookupError):
    """No schedule has that name."""


class InvalidRequest(FluksioError, ValueError):
    """A request to the run explorer (its pages or JSON API) has a malformed or out-of-range argument."""


class MetricRefused(FluksioError, ValueError):
    """A node emitted what cannot be a metric: a name that is no metric's, a value that is not a finite number.
    Raised at the node's own call of ``emit``, which its error and traceback point at."""


def first_line(error: str | None, default: str = "") -> str:
    """The first non-blank line of an error text (a node's error, a child run's reason), for a one-line
    message; ``default`` when there is no text or only whitespace.

    The text is stripped first, so a message that begins with a newline still shows its words, not an
    empty line.
    """
    text = (error or "").strip()
    return text.splitlines()[0] if text else default


def did_you_mean(word: str, choices: Iterable[str], before: str = "; ") -> str:
    """``before`` + ``"did you mean 'lr'?"`` when ``word`` looks like a misspelling of one of ``choices``
    (:func:`difflib.get_close_matches`), else ``""``: the end of a message that names an unknown word.

    Appended at the end, so a message reads whole without it (``"'lrr' is not an input of flow 'train' (it
    declares: epochs, lr); did you mean 'lr'?"``).
    """
    close = difflib.get_close_matches(word, [c for c in choices if c != word], n=1)
    return f"{before}did you mean {close[0]!r}?" if close else ""
