"""Secrets on the worker that runs a node: found by name, handed to the node, hidden from what it writes.

A ``Secret`` input reaches a worker as its name (see fluksio/flows/secret.py). The worker finds the value
in its own environment, ``FLUKSIO_SECRET_<NAME>``, else in the file ``<NAME>`` of ``FLUKSIO_SECRETS_DIR``
(which must be readable by its owner only: mode 0600; one trailing newline is dropped), and the node gets
a ``Secret`` carrying it. Which inputs are secrets is what the flow registered on this worker declares,
never what a message says.

While a node runs, its secrets' values are replaced by ``***`` in what it logs — the captured logs of its
row (fluksio/execution/capture.py) and any log record this process makes meanwhile (:func:`hidden`) — and
in its error; outputs that carry a value fail the node instead of reaching the run store.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fluksio.errors import NodeFailed
from fluksio.flows.flow import Flow
from fluksio.flows.secret import Secret
from fluksio.settings import SECRET_ENV_PREFIX, Settings

#: What a secret's value is replaced with.
MASK = "***"

_lock = threading.Lock()
#: The values of the secrets nodes of this process hold now (a count each: two calls may share one).
_active: Counter[str] = Counter()
_factory_installed = False


def secret_inputs(flow: Flow) -> frozenset[str]:
    """The flow's inputs declared ``Secret``: the messages whose value is a secret's name."""
    return frozenset(name for name, spec in flow.inputs.items() if spec.type is Secret)


def resolve(name: str, settings: Settings, machine: str, node: str) -> Secret:
    """The secret ``name`` as this worker has it, or :class:`NodeFailed` naming the secret and the machine."""
    value = os.environ.get(SECRET_ENV_PREFIX + name)
    if value is not None:
        return Secret(name, value)
    folder = settings.secrets_dir
    if folder is not None:
        found = _from_file(folder / name, name, machine)
        if found is not None:
            return Secret(name, found)
    where = f"a file {folder / name}" if folder is not None else "a file in a folder named by FLUKSIO_SECRETS_DIR"
    raise NodeFailed(f"node {node!r} needs the secret {name!r}, which machine {machine} does not have: set "
                     f"{SECRET_ENV_PREFIX}{name} in the environment of its `fluksio worker`, or write the value to "
                     f"{where} (mode 0600)")


def _from_file(path: Path, name: str, machine: str) -> str | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise NodeFailed(f"cannot read the secret {name!r} from {path} on machine {machine}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise NodeFailed(f"the secret {name!r} on machine {machine}: {path} is not a file")
    if info.st_mode & 0o077:
        raise NodeFailed(f"refusing the secret {name!r} on machine {machine}: {path} may be read by others "
                         f"(mode {stat.S_IMODE(info.st_mode):04o}); a secret's file must be its owner's only: "
                         f"chmod 600 {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NodeFailed(f"cannot read the secret {name!r} from {path} on machine {machine}: {exc}") from None
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


def redact(text: str | None, values: Collection[str]) -> str | None:
    """``text`` with every one of ``values`` replaced by :data:`MASK` (longest first, so that a value inside
    another is never left half shown)."""
    if not text or not values:
        return text
    for value in sorted(values, key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    return text


def carried(value: Any, secrets: Collection[str]) -> bool:
    """Whether one of ``secrets`` appears in the JSON value ``value`` (a string in it, or a key)."""
    if isinstance(value, str):
        return any(secret and secret in value for secret in secrets)
    if isinstance(value, Mapping):
        return any(carried(k, secrets) or carried(v, secrets) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(carried(item, secrets) for item in value)
    return False


@contextmanager
def hidden(values: Iterable[str]) -> Iterator[frozenset[str]]:
    """While inside, every log record this process makes has ``values`` replaced by :data:`MASK` (its message,
    with its arguments, is formatted first). Yields the values."""
    shown = frozenset(value for value in values if value)
    if not shown:
        yield shown
        return
    _install_factory()
    with _lock:
        _active.update(shown)
    try:
        yield shown
    finally:
        with _lock:
            _active.subtract(shown)
            for value in [v for v, count in _active.items() if count <= 0]:
                del _active[value]


def _install_factory() -> None:
    """Wrap logging's record factory once: records made while a secret is held are redacted as they are made,
    before any handler (the worker's log, the capture of a node's logs) sees them."""
    global _factory_installed
    with _lock:
        if _factory_installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            if _active:
                with _lock:
                    values = list(_active)
                try:
                    message = record.getMessage()
                except Exception:  # a malformed call (arguments that do not fit): logging reports it later
                    return record
                masked = redact(message, values)
                if masked != message:
                    record.msg, record.args = masked, None
            return record

        logging.setLogRecordFactory(factory)
        _factory_installed = True
