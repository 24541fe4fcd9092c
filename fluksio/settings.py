"""Configuration: one :class:`Settings` object, read once and passed explicitly.

Sources, highest priority first: constructor arguments, ``FLUKSIO_*``
environment variables, then ``fluksio.toml`` in the working directory or the
file named by ``FLUKSIO_CONFIG``. Unknown keys are rejected so a misspelt
setting is an error, not a silent default.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from fluksio.errors import ConfigError

#: The broker URL that selects the embedded, single-process mode.
EMBEDDED_BROKER = "memory://"
#: ``FLUKSIO_SECRET_<NAME>``: the value of the ``Secret`` input named ``NAME``, on the worker that runs its node.
#: Not a setting: never read into :class:`Settings`, never exported to a Slurm job.
SECRET_ENV_PREFIX = "FLUKSIO_SECRET_"
#: The settings that switch message signing on, all together.
SIGNING_FIELDS = ("signing_key", "signing_certificate", "signing_cert_store")


def _config_file() -> Path:
    return Path(os.environ.get("FLUKSIO_CONFIG", "fluksio.toml"))


class Settings(BaseSettings):
    """Every knob of an installation. All processes of one installation share them."""

    model_config = SettingsConfigDict(env_prefix="FLUKSIO_", extra="forbid", frozen=True)

    broker_url: str = EMBEDDED_BROKER
    result_backend: str | None = None
    database_url: str = "sqlite:///.fluksio/fluksio.db"
    #: The content-addressed artifact store: a folder every host mounts, or an fsspec URL of an object store
    #: (``s3://bucket/prefix``, ``gs://…``, ``az://…``, ``file://…``; see fluksio/artifacts/remote.py).
    artifacts_dir: Path | str = Path(".fluksio/artifacts")
    #: Endpoint of an S3-compatible server for ``s3://`` artifacts (MinIO, Ceph, moto …); unset:
    #: ``AWS_ENDPOINT_URL`` if set, else AWS itself. Credentials come from the usual AWS places.
    artifacts_endpoint_url: str | None = None
    #: Local copies of object-store artifacts that nodes read here (``Artifact.path``), least recently used
    #: evicted first. Unused with a folder store, whose files are read in place.
    artifacts_cache: Path = Path(".fluksio/artifacts-cache")
    #: Size limit of the artifacts cache, in MB (an artifact larger than the limit is still fetched).
    artifacts_cache_mb: int = Field(default=10_240, ge=0)
    #: How long an object-store request may wait to connect, or for its answer's next bytes, in seconds
    #: (an S3-compatible server may think a while before it answers the completion of a large upload).
    artifacts_timeout_s: float = Field(default=60.0, gt=0)
    #: Modules or ``file.py`` paths whose flows are registered (comma-separated in the environment).
    flows: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Provisioner profiles (a JSON list); unset: ``config/provisioners.json`` in the working directory if
    #: present, else none.
    provisioners: Path | None = None

    #: Name of this machine in the placer's books (default: the host name).
    machine_name: str | None = None
    #: Labels the embedded machine carries besides its name.
    labels: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: CPUs the embedded machine offers (default: the host's count).
    cpus: int | None = Field(default=None, ge=1)
    #: RAM the embedded machine offers, in MB (default: the host's).
    ram_mb: int | None = Field(default=None, ge=0)
    #: Driver slots (threads) of a driver pool.
    driver_concurrency: int = Field(default=16, ge=1)

    #: How often a running driver refreshes its run's lease, in seconds.
    lease_interval_s: float = Field(default=5.0, gt=0)
    #: A lease older than this means the driver died, in seconds.
    stale_after_s: float = Field(default=60.0, gt=0)
    #: How often a worker refreshes its heartbeat, in seconds.
    heartbeat_interval_s: float = Field(default=2.0, gt=0)
    #: A machine whose heartbeat is older than this is gone (its calls are lost), in seconds.
    heartbeat_ttl_s: float = Field(default=10.0, gt=0)
    #: How long store writes are retried while the database is unreachable, in seconds.
    db_outage_s: float = Field(default=30.0, ge=0)
    #: How long a driver keeps retrying while the broker is unreachable, in seconds.
    broker_outage_s: float = Field(default=60.0, ge=0)
    #: Resume a run whose driver died as soon as a driver process finds its lease stale (a worker with drivers
    #: coming back continues the work; what finished meanwhile is kept). False: it is marked ``abandoned``
    #: until `fluksio resume`. The embedded default keeps it off unless set (see Runtime.embedded).
    auto_resume: bool = True
    #: Longest a busy embedded worker's consumer waits between two looks at its queues, in seconds (a message
    #: wakes it at once; looking often keeps a hop from waiting for a sleeping thread to run again, and gives
    #: Celery's loop its turn to acknowledge). Once it has taken nothing for 2 s, it looks once a second.
    memory_polling_interval_s: float = Field(default=0.001, gt=0)
    #: The longest list (product of lists) a mapped node maps over: a longer one fails the node.
    max_elements: int = Field(default=100_000, ge=1)
    #: Named installation-wide slot counts (``{"licenses": 4}``; a ``[pools]`` table in fluksio.toml): a node
    #: with ``pool="licenses"`` holds one slot while it runs, on any machine.
    pools: dict[str, int] = Field(default_factory=dict)
    #: Captured logs kept per node call, in characters.
    log_limit_chars: int = Field(default=64_000, ge=0)
    #: A node worker with GPUs forks each GPU call from a fork server that imported the flows already (warm);
    #: false: each starts in a fresh interpreter, which imports them again (fluksio/execution/warm.py).
    gpu_fork_server: bool = True
    #: Which code a worker runs: ``registered`` (only the flows FLUKSIO_FLOWS loaded here), ``signed`` (also code
    #: packages shipped with a run and signed by a certificate FLUKSIO_SIGNING_CERT_STORE trusts) or ``any`` (any
    #: package: anyone who can write your Redis can run code here). See flows/package.py.
    accept_code: Literal["registered", "signed", "any"] = "registered"
    #: The largest code package a submit makes, in MB: a bigger one is refused, naming its largest files.
    code_max_mb: float = Field(default=20.0, gt=0)
    #: A worker's on-disk cache of unpacked code packages, in MB; beyond it the least recently used go.
    code_cache_mb: float = Field(default=1024.0, gt=0)
    #: Types a stored scikit-learn model may hold besides those skops trusts (``module.Class``, as skops names
    #: them; comma-separated in the environment): a type made on load is code run on load (fluksio/codecs/
    #: estimators.py). Every machine that runs or reads the flow needs the same list.
    trusted_types: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Celery task events (what Flower shows) from the start. Off, they cost four broker messages per
    #: call that nobody reads; `fluksio flower` switches them on in running workers when it starts.
    task_events: bool = False
    #: ``user:password`` the run explorer (`fluksio ui`) asks for; it refuses to listen on an address other
    #: hosts reach without one (``--basic-auth`` overrides it).
    ui_basic_auth: str | None = None

    #: Message signing (README "Security"): this process's private key (PEM, RSA, unencrypted, mode 0600),
    #: its X.509 certificate, and the certificates it trusts (a folder of PEM files, or one file or glob).
    #: All three or none: with them every Celery message is signed and only signed ones are accepted
    #: (Celery's ``auth`` serializer), and so is every message on a run's inbox.
    signing_key: Path | None = None
    signing_certificate: Path | None = None
    signing_cert_store: Path | None = None
    #: Where a worker finds the value of a ``Secret`` input named ``NAME`` when ``FLUKSIO_SECRET_NAME`` is not
    #: set: the file ``NAME`` in this folder (mode 0600, its content the value; one trailing newline dropped).
    secrets_dir: Path | None = None

    #: Alert rules (a JSON list); unset: ``config/alerts.json`` in the working directory if present, else none.
    alerts: Path | None = None
    #: The run explorer's address (``http://host:8585``): alerts link to ``<explorer_url>/runs/<id>``.
    explorer_url: str | None = None
    #: How long an alert is retried (with backoff) before it is recorded as failed, in seconds.
    alert_retry_s: float = Field(default=300.0, ge=0)
    #: The first pause between two tries of an alert, doubled after each (at most 60 s), in seconds.
    alert_backoff_s: float = Field(default=1.0, gt=0)
    #: How long one try of an alert may take (connect, send, answer), in seconds.
    alert_timeout_s: float = Field(default=10.0, gt=0)
    #: The SMTP server email alerts go through; unset: rules with an ``email`` target are refused.
    smtp_host: str | None = None
    smtp_port: int = Field(default=25, ge=1, le=65535)
    smtp_username: str | None = None
    smtp_password: str | None = None
    #: ``STARTTLS`` after connecting (port 587); ``smtp_ssl``: TLS from the first byte (port 465).
    smtp_starttls: bool = False
    smtp_ssl: bool = False
    #: The From address of email alerts (default: ``fluksio@<host name>``).
    smtp_from: str | None = None
    #: How often a beat re-reads the schedules table (added, paused, removed schedules), in seconds.
    schedule_refresh_s: float = Field(default=5.0, gt=0)
    #: The most missed ticks one schedule with ``catchup=all`` submits when a beat starts (the newest ones).
    schedule_catchup_limit: int = Field(default=100, ge=1)

    @field_validator("artifacts_dir", mode="before")
    @classmethod
    def _path_or_url(cls, value: Any) -> Any:
        """A URL (``scheme://…``) stays text; anything else is a folder. A URL must name its bucket."""
        if isinstance(value, str) and "://" in value:
            scheme, _, rest = value.partition("://")
            if not scheme or not rest.strip("/"):
                raise ValueError(f"{value!r} names no bucket; write e.g. s3://my-bucket/fluksio")
            return value.rstrip("/")
        return Path(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _signing_whole(self) -> Settings:
        given = {name: getattr(self, name) for name in SIGNING_FIELDS}
        if any(value is not None for value in given.values()) and not all(v is not None for v in given.values()):
            missing = ", ".join(f"FLUKSIO_{name.upper()}" for name, value in given.items() if value is None)
            raise ValueError(f"message signing needs a key, its certificate and a store of trusted certificates; "
                             f"{missing} {'is' if missing.count(',') == 0 else 'are'} not set")
        return self

    @field_validator("pools")
    @classmethod
    def _pool_names_and_slots(cls, value: dict[str, int]) -> dict[str, int]:
        for name, slots in value.items():
            if not name.isidentifier() or len(name) > 200:
                raise ValueError(f"pool name {name!r} is not valid; use a Python identifier such as 'licenses'")
            if slots < 1:
                raise ValueError(f"pool {name!r} must have at least 1 slot, got {slots}")
        return value

    @field_validator("trusted_types")
    @classmethod
    def _dotted_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not all(part.isidentifier() for part in name.split(".")) or "." not in name:
                raise ValueError(f"trusted type {name!r} is not a dotted name; write it as skops names it, "
                                 "e.g. 'mypackage.transforms.Clip'")
        return value

    @field_validator("flows", "labels", "trusted_types", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)  # a JSON list, as pydantic-settings would read it
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=_config_file())
        return (init_settings, env_settings, toml)

    @property
    def signing(self) -> bool:
        """True when messages are signed and only signed ones are accepted (all three signing settings set)."""
        return self.signing_key is not None

    @property
    def embedded(self) -> bool:
        """True when no broker is configured: everything runs in this process."""
        return self.broker_url.startswith(EMBEDDED_BROKER)

    @property
    def engine(self) -> str:
        return "embedded" if self.embedded else urlsplit(self.broker_url).scheme


def load_settings(**overrides: Any) -> Settings:
    """Read settings, turning pydantic's report into a :class:`ConfigError` that names the source."""
    _complain_about_unknown_env()
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(settings)'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(
            f"invalid fluksio settings ({problems}); check FLUKSIO_* variables and {_config_file()}"
        ) from None
    except SettingsError as exc:  # a value pydantic-settings could not parse, before validating it
        found = re.search(r'field "(\w+)" from source "(\w+)"', str(exc))
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        if found and found.group(2) == "EnvSettingsSource":
            raise ConfigError(f"FLUKSIO_{found.group(1).upper()} cannot be read{cause}; it takes JSON for this "
                              "setting") from None
        raise ConfigError(f"cannot read {_config_file()}: {exc}{cause}") from None
    except (OSError, ValueError) as exc:  # a TOML file that does not parse
        raise ConfigError(f"cannot read {_config_file()}: {exc}") from None


def _complain_about_unknown_env() -> None:
    known = {f"FLUKSIO_{name.upper()}" for name in Settings.model_fields} | {"FLUKSIO_CONFIG"}
    unknown = sorted(key for key in os.environ if key.startswith("FLUKSIO_") and key not in known
                     and not key.startswith(SECRET_ENV_PREFIX))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )


def require_redis_broker(settings: Settings) -> None:
    """The distributed mode keeps the placer's books in the broker's Redis: no other broker will do."""
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        raise ConfigError(f"FLUKSIO_BROKER_URL={redact_url(settings.broker_url)}: only redis:// and rediss:// "
                          "brokers are supported (the placer's books live in the same Redis)")


def verified_redis_url(url: str) -> str:
    """``url`` as every fluksio process uses it: a ``rediss://`` URL that does not say ``ssl_cert_reqs``
    verifies the server's certificate (``ssl_cert_reqs=required``).

    redis-py verifies by default, but kombu does not (it warns and goes on without checking), and Celery's
    Redis result backend refuses such a URL outright: said once here, all three verify. ``ssl_cert_reqs=none``
    stays as written (``fluksio security check`` reports it).
    """
    parts = urlsplit(url)
    if parts.scheme != "rediss":
        return url
    if any(key == "ssl_cert_reqs" for key, _ in parse_qsl(parts.query, keep_blank_values=True)):
        return url
    # Appended as it is, leaving the rest of the query as the user wrote it (paths unescaped, readable).
    return urlunsplit(parts._replace(query="&".join(filter(None, [parts.query, "ssl_cert_reqs=required"]))))


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***``, safe for logs, tables and error messages.

    Also for URLs too mistyped to parse: whatever stands between a ``:`` and the last ``@`` is hidden.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        parts, password = None, None
    if parts is not None and password is not None:
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
    if "@" in url:
        head, tail = url.rsplit("@", 1)
        colon = head.rfind(":")
        if colon != -1 and colon + 1 < len(head) and not head[colon + 1:].startswith("//"):
            return f"{head[:colon + 1]}***@{tail}"
    return url


def is_loopback(address: str) -> bool:
    """Whether only this host can reach ``address`` (``''`` and ``0.0.0.0`` mean every interface): what a
    server of fluksio (the explorer, Flower) may listen on without a password."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def read_json_file(path: Path, what: str) -> Any:
    """The JSON in the file at ``path``; a :class:`ConfigError` naming ``what`` it is (``alert rules``,
    ``provisioner profiles``) and what is wrong with it — unreadable, or not JSON (with the line and column)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what} {path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
                          ) from None


#: A configuration file with many mistakes gets the first few named, and a count of the rest.
MAX_PROBLEMS_SHOWN = 6

Entry = TypeVar("Entry", bound=BaseModel)


def parse_json_list(data: Any, source: str, model: type[Entry], *, item: str, holds: str,
                    describe: Callable[[Any], str], named_before: Callable[[int], str]) -> list[Entry]:
    """The entries of a configuration file that is a JSON list of objects (alert rules, provisioner profiles),
    each validated strictly as ``model``, their names unique; else a :class:`ConfigError` naming every problem
    by ``source``, entry and field. A bad file is refused as a whole: half of it read would do half a job.

    ``item`` names an entry in messages (``rule 2 ('nightly')``, ``rule 3`` when it has no name); ``holds``
    says what the list should hold (it follows "must be a JSON list of"); ``describe`` words one of
    pydantic's errors (``field: what is wrong``); ``named_before`` names the entry already called the same
    as a later one, from its index (``profile 0``, ``another rule``).
    """
    if not isinstance(data, list):
        raise ConfigError(f"{source}: must be a JSON list of {holds}, got {type(data).__name__}")
    problems: list[str] = []
    entries: list[Entry] = []
    first: dict[str, int] = {}
    for index, entry in enumerate(data):
        name = entry.get("name") if isinstance(entry, dict) else None
        where = f"{item} {index} ({name!r})" if isinstance(name, str) and name else f"{item} {index}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be an object, got {type(entry).__name__}")
            continue
        try:
            # Strict: "cpus": "4" or "gpus": true is a mistake in a file, not something to guess about.
            entries.append(model.model_validate_json(json.dumps(entry), strict=True))
        except ValidationError as exc:
            problems.extend(f"{where}: {describe(err)}" for err in exc.errors())
        if isinstance(name, str):
            if name in first:
                problems.append(f"{where}: name: {named_before(first[name])} has the same name; "
                                "names must be unique")
            else:
                first[name] = index
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = f"; and {len(problems) - len(shown)} more problem(s)" if len(problems) > len(shown) else ""
        raise ConfigError(f"{source}: " + "; ".join(shown) + more)
    return entries
