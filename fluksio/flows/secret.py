"""``Secret``: a credential a node uses without its value ever being written down.

A flow declares the input (``Flow("fetch", inputs={"token": Secret})``); a submit gives the secret's
**name** (``params={"token": "HF_TOKEN"}``), which is all a run's rows, its cache keys, its Celery
messages, its events, Flower and the explorer ever hold. The worker that runs a node needing the
input looks the name up in its own environment (``FLUKSIO_SECRET_HF_TOKEN``) or secrets folder
(``FLUKSIO_SECRETS_DIR/HF_TOKEN``) and hands the node a ``Secret`` whose :attr:`~Secret.value` is the
string (fluksio/execution/secrets.py). Pure: no I/O here.
"""

from __future__ import annotations

import re
from typing import Any

#: A secret's name: capitals, digits and ``_`` (it ends an environment variable's name). Lowercase is refused
#: on purpose: most tokens have some, so a value given where its name belongs is not taken for a name.
NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,127}$")


class Secret:
    """A secret input as a node receives it: ``.name``, and ``.value`` (the string), which nothing prints.

    ``repr()`` and ``str()`` show the name only, so an f-string or a log line that takes the object shows no
    value; a ``Secret`` is not JSON and cannot be pickled, so it cannot leave the node as an output either.
    """

    __slots__ = ("name", "_value")

    def __init__(self, name: str, value: str | None = None) -> None:
        self.name = check_name(name)
        self._value = value

    @property
    def value(self) -> str:
        """The secret's value: only inside a node, on the worker that resolved it."""
        if self._value is None:
            raise ValueError(f"Secret({self.name!r}) has no value here: a secret's value exists only inside the "
                             "node that receives it, on the worker that resolved it")
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.name!r})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError(f"{self!r} cannot be pickled: a secret's value stays in the node that received it")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """As a declared flow input: its value is the secret's name (validated, then stored as a string)."""
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(
            lambda value: secret_name(value, "the input"),
            serialization=core_schema.plain_serializer_function_ser_schema(str),
        )


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(_misnamed(name))
    return name


def secret_name(given: Any, where: str) -> str:
    """The name a submit gives for a ``Secret`` input (a string, or a ``Secret``), or :class:`ValueError`
    saying what a name looks like — never repeating what was given, which may be the value itself."""
    if isinstance(given, Secret):
        return given.name
    if isinstance(given, str) and NAME.match(given):
        return given
    raise ValueError(f"{where} is a Secret: give the secret's name ({_misnamed(given)}), never its value")


def _misnamed(given: Any) -> str:
    shown = f"a string of {len(given)} characters" if isinstance(given, str) else f"a {type(given).__name__}"
    return (f"a name is 1 to 128 capital letters, digits and '_', starting with a letter, like HF_TOKEN; "
            f"got {shown}")
