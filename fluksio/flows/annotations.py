"""What a node's annotations promise: each annotated parameter receives its value validated into its type.

Read once, when the node is declared: ``typing.get_type_hints`` resolves the
annotations, and each becomes a pydantic ``TypeAdapter`` (pydantic models,
dataclasses, ``date``, ``UUID``, ``Decimal``, ``Enum``, ``Path``, tuples, sets and
containers of them). A class pydantic has no schema for (``numpy.ndarray``,
``pandas.DataFrame``) is checked with ``isinstance``. Validation is pydantic's
lax mode, which is what turns the JSON a value travelled as back into its type
(``"2026-01-02"`` into a ``date``, a list into a ``tuple``); what cannot be made
into the type fails the node. Pure: no Celery, no SQL.
"""

from __future__ import annotations

import functools
import typing
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from fluksio.errors import FlowError

#: For classes pydantic knows nothing of: validated as ``isinstance`` checks.
ARBITRARY_TYPES = ConfigDict(arbitrary_types_allowed=True)
#: Errors of one validation named in a node's failure, at most.
ERRORS_SHOWN = 3


def parameter_types(fn: Callable[..., Any], params: Sequence[str], where: str,
                    scope: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The annotation of each of ``params`` that has one (none for ``Any``, ``object`` or no annotation).

    ``scope``: the names where the node was declared (a class defined in the same function), besides the
    function's module.
    """
    try:
        hints = typing.get_type_hints(fn, localns=dict(scope) if scope is not None else None)
    except Exception as exc:  # NameError for a name only imported under TYPE_CHECKING, and the like
        raise FlowError(f"{where}: cannot resolve the annotations of its function ({type(exc).__name__}: {exc}); "
                        "an annotation decides what the parameter receives, so the names it uses must be importable "
                        "at run time: import them at module level, or drop the annotation") from None
    return {p: hints[p] for p in params if p in hints and hints[p] not in (Any, object)}


def adapter_for(annotation: Any, where: str) -> TypeAdapter[Any]:
    """The validator of ``annotation``; :class:`FlowError` naming ``where`` when pydantic cannot make one."""
    try:
        hash(annotation)
    except TypeError:  # an unhashable annotation: made each time
        return _adapter(annotation, where)
    try:
        return _cached_adapter(annotation)
    except FlowError:
        return _adapter(annotation, where)  # fails again, naming where


@functools.lru_cache(maxsize=1024)
def _cached_adapter(annotation: Any) -> TypeAdapter[Any]:
    return _adapter(annotation, "")


def _adapter(annotation: Any, where: str) -> TypeAdapter[Any]:
    try:
        return TypeAdapter(annotation)
    except Exception as plain:
        try:
            # A model or dataclass has its own config and refuses this one: then the plain error stands. An
            # instance where a type belongs would be let through unchecked, with a warning: an error here.
            with warnings.catch_warnings():
                warnings.simplefilter("error", UserWarning)  # pydantic's ArbitraryTypeWarning (a UserWarning)
                return TypeAdapter(annotation, config=ARBITRARY_TYPES)
        except Exception:
            raise FlowError(f"{where or 'an annotation'}: pydantic cannot validate values of {type_name(annotation)} "
                            f"({type(plain).__name__}: {str(plain).splitlines()[0]}); for a model or dataclass "
                            "with fields of such types, allow them (pydantic: ConfigDict(arbitrary_types_allowed="
                            "True)), or leave the parameter unannotated to receive the value as it is") from None


def type_name(annotation: Any) -> str:
    """``Cfg``, ``numpy.ndarray``, ``list[pandas.DataFrame]``: an annotation as a message names it."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        module = annotation.__module__
        return annotation.__qualname__ if module in ("builtins", "__main__") else f"{module}.{annotation.__qualname__}"
    return repr(annotation).replace("typing.", "")


def fit_error(exc: ValidationError) -> str:
    """What did not fit, from pydantic's errors: ``at day: Input should be a valid date … (got 'soon')``."""
    errors = exc.errors(include_url=False)
    parts = []
    for error in errors[:ERRORS_SHOWN]:
        location = ".".join(str(part) for part in error["loc"])
        got = sample(error.get("input"))
        parts.append(f"{'at ' + location + ': ' if location else ''}{error['msg']} (got {got})")
    if len(errors) > ERRORS_SHOWN:
        parts.append(f"and {len(errors) - ERRORS_SHOWN} more")
    return "; ".join(parts)


def sample(value: Any, width: int = 80) -> str:
    """A value as a message shows it: short, and an array or frame by its type and shape, not its contents."""
    kind = type(value)
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, (str, bytes)):
        return f"a {kind.__module__.split('.')[0]}.{kind.__qualname__} of shape {tuple(shape)}"
    text = repr(value)
    text = text if len(text) <= width else text[: width - 1] + "…"
    return f"{text} ({kind.__qualname__})" if kind not in (dict, list, str) else text
