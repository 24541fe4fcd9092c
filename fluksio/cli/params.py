"""Parsing ``-p name=value`` and ``-g name=v1,v2`` arguments."""

from __future__ import annotations

import json
from typing import Any

import click


def parse_value(text: str) -> Any:
    """JSON when it parses (``3``, ``0.1``, ``true``, ``[1,2]``), else the plain string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _split(item: str, option: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint=option)
    return name.strip(), value


def parse_params(items: tuple[str, ...], string_inputs: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``NAME=VALUE`` pairs; inputs declared as ``str`` keep their text as it is (``-p name=3`` is ``"3"``)."""
    params: dict[str, Any] = {}
    for item in items:
        name, value = _split(item, "-p/--param")
        if name in params:
            raise click.BadParameter(f"{name!r} is given twice", param_hint="-p/--param")
        params[name] = value if name in string_inputs else parse_value(value)
    return params


def string_inputs(inputs: dict[str, Any]) -> frozenset[str]:
    """Names of a flow's inputs whose declared type is ``str``."""
    return frozenset(name for name, spec in inputs.items() if spec.type is str)


def parse_grid(items: tuple[str, ...]) -> dict[str, list[Any]]:
    grid: dict[str, list[Any]] = {}
    for item in items:
        name, value = _split(item, "-g/--grid")
        values = [parse_value(v) for v in value.split(",") if v != ""]
        if not values:
            raise click.BadParameter(f"{name!r} has no values; write {name}=V1,V2", param_hint="-g/--grid")
        grid[name] = values
    return grid


def parse_seeds(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(f"seeds must be whole numbers separated by commas, got {text!r}",
                                 param_hint="--seeds") from None
