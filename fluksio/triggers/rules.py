"""Alert rules: ``config/alerts.json``, a JSON list saying who hears of which runs' ends, and how.

    [{"name": "nightly-failures", "statuses": ["error", "abandoned"], "flow": "train*",
      "webhook": {"url": "https://hooks.example.org/fluksio", "secret": "…", "format": "json"}}]

A bad file is refused as a whole, every problem named by rule and field: a rule half read would stay
silent exactly when it was meant to speak.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fluksio.settings import parse_json_list, read_json_file

#: Where an installation's rules are when ``FLUKSIO_ALERTS`` names no file (relative to the working
#: directory); absent, no alerts are sent.
DEFAULT_PATH = Path("config/alerts.json")
#: Rule names appear in the alert log and in `fluksio alerts test NAME`.
RULE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
#: An address as SMTP servers take it: one ``@``, no spaces or line breaks.
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
#: The run statuses a rule may name (the ends of a run).
Status = Literal["error", "abandoned", "cancelled", "ok"]


class WebhookTarget(BaseModel):
    """POST the alert as JSON to ``url``; signed with HMAC-SHA256 when a ``secret`` is given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    secret: str | None = None
    #: ``json``: fluksio's own body; ``slack``: ``{"text": …}``, as Slack (and Mattermost, Teams' Slack
    #: connector …) take it.
    format: Literal["json", "slack"] = "json"

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL (e.g. 'https://hooks.example.org/fluksio')")
        if any(char.isspace() or not char.isprintable() for char in value):
            raise ValueError(f"{value!r} has a space or a control character in it; percent-encode it (%20)")
        return value

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("an empty secret signs nothing; leave it out or give one")
        return value

    def describe(self) -> str:
        """Where it goes, without the path or query (a Slack webhook's path is its password)."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}/…"


class EmailTarget(BaseModel):
    """Mail the alert to ``to`` through the installation's SMTP server (the ``smtp_*`` settings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    to: tuple[str, ...] = Field(min_length=1)
    subject_prefix: str = "[fluksio]"

    @field_validator("to")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for address in value:
            if not EMAIL.match(address):
                raise ValueError(f"{address!r} is not an email address")
        return value

    @field_validator("subject_prefix")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value or "\r" in value:
            raise ValueError("a subject is one line")
        return value

    def describe(self) -> str:
        return "mailto:" + ",".join(self.to)


class AlertRule(BaseModel):
    """Who hears of runs that end in ``statuses`` (of flows matching the glob ``flow``), and how."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    statuses: tuple[Status, ...] = Field(default=("error", "abandoned"), min_length=1)
    #: A glob on the flow's name (``train*``); none: every flow.
    flow: str | None = None
    webhook: WebhookTarget | None = None
    email: EmailTarget | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not RULE_NAME.match(value):
            raise ValueError(f"{value!r} is not a rule name; use letters, digits, '_', '.' and '-'")
        return value

    @model_validator(mode="after")
    def _one_target(self) -> AlertRule:
        if (self.webhook is None) == (self.email is None):
            raise ValueError("give a rule exactly one target: \"webhook\": {\"url\": …} or \"email\": {\"to\": […]}")
        return self

    def matches(self, flow: str, status: str) -> bool:
        return status in self.statuses and (self.flow is None or fnmatch.fnmatchcase(flow, self.flow))

    @property
    def target(self) -> WebhookTarget | EmailTarget:
        target = self.webhook or self.email
        assert target is not None
        return target


def load_rules(path: str | Path) -> list[AlertRule]:
    """Every rule of the file at ``path``; a :class:`ConfigError` naming each problem if any is wrong."""
    path = Path(path)
    return parse_rules(read_json_file(path, "alert rules"), source=str(path))


def parse_rules(data: Any, source: str = "alert rules") -> list[AlertRule]:
    """Rules from already-decoded JSON (``source`` names it in errors)."""
    return parse_json_list(data, source, AlertRule, item="rule",
                           holds="rules (each an object with name, statuses and a webhook or email)",
                           describe=_describe, named_before=lambda _index: "another rule")


def _describe(err: Any) -> str:
    loc = [str(part) for part in err["loc"]]
    where = ".".join(loc) if loc else "(rule)"
    if err["type"] == "extra_forbidden":
        targets: dict[str, type[BaseModel]] = {"webhook": WebhookTarget, "email": EmailTarget}
        model = targets.get(loc[0], AlertRule) if len(loc) > 1 else AlertRule
        known = list(model.model_fields)
        hint = difflib.get_close_matches(loc[-1], known, n=1)
        guess = f"did you mean {hint[0]!r}? " if hint else ""
        return f"{where}: unknown field; {guess}known fields: {', '.join(known)}"
    if err["type"] == "missing":
        return f"{where}: required"
    if err["type"] == "literal_error" and loc and loc[0] == "statuses":
        return f"{where}: {err['input']!r} is not a status a run ends in; use error, abandoned, cancelled or ok"
    message = err["msg"].removeprefix("Value error, ")
    given = err.get("input")
    if err["type"] != "value_error" and (given is None or isinstance(given, (str, int, float, bool))):
        message += f" (got {json.dumps(given)})"
    return f"{where}: {message}"


def rules_path(alerts: Path | None, cwd: Path | None = None) -> Path | None:
    """The rules file an installation uses: ``alerts`` (the setting) if given, else ``config/alerts.json``
    under ``cwd`` when that file exists, else none (no alerts)."""
    if alerts is not None:
        return alerts
    default = (cwd or Path.cwd()) / DEFAULT_PATH
    return default if default.is_file() else None
