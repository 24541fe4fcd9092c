"""``fluksio security check``: what an installation's safety relies on, read from its settings.

One line per thing an attacker could use (README "Security"): pickle (always off), message signing, which
shipped code workers run (FLUKSIO_ACCEPT_CODE), TLS on each connection (broker, result backend, run store,
artifact store), the secrets folder, and who can reach Flower and the run explorer. Each is ``ok``,
``warn`` (works, but less safe than it could be) or ``fail`` (a mistake that breaks what it is for: a key
others can read, a secrets file that is). The exit code is 1 when one fails (with ``--strict``, also when
one warns).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import click
from rich.table import Table

from fluksio.cli import render
from fluksio.errors import ConfigError
from fluksio.settings import SECRET_ENV_PREFIX, Settings, load_settings, redact_url, verified_redis_url

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"
#: A signing certificate that expires sooner than this is said, in days.
EXPIRY_WARNING_DAYS = 30


@dataclass(frozen=True)
class Finding:
    check: str
    verdict: str
    detail: str


@click.group()
def security() -> None:
    """What this installation's safety relies on."""


@security.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per check, in a list.")
@click.option("--strict", is_flag=True, help="Exit 1 on a warning too, not only on a failure.")
@click.option("--offline", is_flag=True, help="Do not ask the broker which processes trust which certificates.")
def check(as_json: bool, strict: bool, offline: bool) -> None:
    """Report pickle, message signing, TLS per connection, the secrets folder, Flower and the explorer."""
    settings = load_settings()
    findings = audit(settings, ask_broker=not offline)
    if as_json:
        click.echo(json.dumps([asdict(f) for f in findings], indent=2))
    else:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for column in ("check", "", "detail"):
            table.add_column(column, overflow="fold")
        colours = {OK: "green", WARN: "yellow", FAIL: "red", INFO: "dim"}
        for finding in findings:
            table.add_row(finding.check, f"[{colours[finding.verdict]}]{finding.verdict}[/]", finding.detail)
        render.console().print(table)
    verdicts = {f.verdict for f in findings}
    sys.exit(1 if FAIL in verdicts or (strict and WARN in verdicts) else 0)


def audit(settings: Settings, ask_broker: bool = True) -> list[Finding]:
    """Every finding about ``settings`` (and, with ``ask_broker``, what the signing processes said of trust)."""
    from fluksio.worker.app import celery_config

    accepted = celery_config(settings)["accept_content"]
    found = [Finding("pickle", OK if "pickle" not in accepted else FAIL,
                     f"off: Celery accepts only {', '.join(accepted)} (fluksio never enables pickle)")]
    found += signing_findings(settings, ask_broker)
    found.append(code_finding(settings))
    found.append(redis_tls("TLS: broker", settings.broker_url, "FLUKSIO_BROKER_URL"))
    found.append(redis_tls("TLS: result backend", settings.result_backend, "FLUKSIO_RESULT_BACKEND")
                 if settings.result_backend else Finding("TLS: result backend", INFO, "none: fluksio reads no results"))
    found.append(store_tls(settings.database_url))
    found.append(artifacts_tls(settings))
    found += secrets_findings(settings)
    found += ui_findings(settings)
    return found


def signing_findings(settings: Settings, ask_broker: bool) -> list[Finding]:
    from fluksio.security.signatures import load_signer

    if not settings.signing and settings.embedded:
        return [Finding("signing", INFO, "off (embedded: one process, no broker anyone else can write to)")]
    if not settings.signing:
        return [Finding("signing", WARN, "off: whoever can write to the broker can run registered nodes with inputs "
                        "of their choosing and forge their results; set FLUKSIO_SIGNING_KEY, _CERTIFICATE and "
                        "_CERT_STORE")]
    try:
        signer = load_signer(settings)
    except ConfigError as exc:
        return [Finding("signing", FAIL, str(exc))]
    assert signer is not None
    found = [Finding("signing", OK, f"on: signs as {signer.identity!r}, trusts {len(signer.trusted)} "
                     f"certificate(s) in {signer.store_path}; unsigned messages are refused")]
    mode = stat.S_IMODE(signer.key_path.stat().st_mode)
    if mode & 0o077:
        found.append(Finding("signing: key", FAIL, f"{signer.key_path} may be read by others (mode {mode:04o}): "
                             f"whoever reads it signs as this installation; chmod 600 {signer.key_path}"))
    expires = signer.certificate.not_valid_after_utc
    if expires - datetime.now(timezone.utc) < timedelta(days=EXPIRY_WARNING_DAYS):
        found.append(Finding("signing: certificate", WARN, f"{signer.certificate_path} expires on "
                             f"{expires:%Y-%m-%d %H:%M} UTC: processes refuse to start with it then"))
    if not signer.trusts(signer.identity):
        found.append(Finding("signing: store", WARN, f"this process's own certificate is not in {signer.store_path}: "
                             "its drivers refuse its node calls' completions"))
    if ask_broker and not settings.embedded:
        found += _trust_findings(settings, signer)
    return found


def code_finding(settings: Settings) -> Finding:
    """Which code a worker with these settings runs (FLUKSIO_ACCEPT_CODE, fluksio/security/code_trust.py)."""
    mode = settings.accept_code
    if mode == "registered":
        return Finding("shipped code", OK, "registered: workers run only the flows FLUKSIO_FLOWS loads; code "
                       "packages shipped with a run are refused (FLUKSIO_ACCEPT_CODE)")
    if mode == "signed":
        if not settings.signing:
            return Finding("shipped code", FAIL, "FLUKSIO_ACCEPT_CODE=signed without FLUKSIO_SIGNING_*: a worker "
                           "refuses to start so; set the signing settings (the store holding the submitters' "
                           "certificates)")
        return Finding("shipped code", OK, f"signed: workers also run code packages shipped with a run, when signed "
                       f"by a certificate in {settings.signing_cert_store}")
    if settings.embedded:
        return Finding("shipped code", INFO, "any (embedded: the code packages come from this process alone)")
    return Finding("shipped code", WARN, "any: workers run every code package shipped with a run: anyone who can "
                   "write your Redis can run code here; use FLUKSIO_ACCEPT_CODE=signed (with FLUKSIO_SIGNING_*)")


def _trust_findings(settings: Settings, signer: object) -> list[Finding]:
    """What the signing processes of the installation said of themselves, compared with this one."""
    import redis

    from fluksio.security import trust
    from fluksio.security.signatures import Signer

    assert isinstance(signer, Signer)
    try:
        client = redis.Redis.from_url(verified_redis_url(settings.broker_url), socket_connect_timeout=3,
                                      socket_timeout=3)
        peers = trust.peers(client)
        client.close()
    except (redis.RedisError, ValueError) as exc:
        return [Finding("signing: peers", INFO, f"could not ask the broker who trusts whom ({type(exc).__name__})")]
    problems = trust.disagreements("this process", signer, peers)
    if problems:
        return [Finding("signing: peers", WARN, problem) for problem in problems]
    names = ", ".join(peer.name for peer in peers) or "none running"
    return [Finding("signing: peers", OK, f"every signing process trusts this one's certificate, and it theirs "
                    f"({names})")]


def redis_tls(check_name: str, url: str, setting: str) -> Finding:
    """TLS on a Redis connection, as kombu and redis-py will make it from ``url``."""
    parts = urlsplit(url)
    if parts.scheme == "memory":
        return Finding(check_name, INFO, "embedded: no network connection")
    if parts.scheme == "redis":
        return Finding(check_name, WARN, f"{redact_url(url)}: no TLS; its password and every message cross the "
                       f"network readable; use rediss:// in {setting}")
    if parts.scheme != "rediss":
        return Finding(check_name, INFO, f"{redact_url(url)}: not Redis, not checked")
    query = dict(parse_qsl(urlsplit(verified_redis_url(url)).query))
    if query.get("ssl_cert_reqs", "").lower() in ("none", "cert_none"):
        return Finding(check_name, WARN, "TLS without checking the server's certificate (ssl_cert_reqs=none): "
                       "anyone in the middle can read and forge; give its CA as ssl_ca_certs=FILE")
    for option in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        if option in query and not Path(query[option]).is_file():
            return Finding(check_name, FAIL, f"{option}={query[option]} in {setting} is not a file here")
    ca = f"CA {query['ssl_ca_certs']}" if "ssl_ca_certs" in query else "the system's CAs"
    client = ", with a client certificate" if "ssl_certfile" in query else ""
    hostname = "" if query.get("ssl_check_hostname", "true").lower() != "false" else " (host name not checked)"
    return Finding(check_name, OK, f"TLS, server verified against {ca}{hostname}{client}")


def store_tls(url: str) -> Finding:
    """TLS to the run store: PostgreSQL's ``sslmode`` (the URL's query reaches libpq as it is)."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme == "sqlite":
        return Finding("TLS: run store", INFO, "SQLite: a local file, no network connection")
    if scheme not in ("postgresql", "postgres"):
        return Finding("TLS: run store", INFO, f"{scheme}: not checked")
    mode = dict(parse_qsl(parts.query)).get("sslmode", "prefer")
    if mode == "verify-full":
        return Finding("TLS: run store", OK, "sslmode=verify-full: TLS, server certificate and host name verified")
    if mode in ("verify-ca", "require"):
        what = "the host name is not checked" if mode == "verify-ca" else "the server is not verified"
        return Finding("TLS: run store", WARN, f"sslmode={mode}: TLS, but {what}; use sslmode=verify-full")
    return Finding("TLS: run store", WARN, f"sslmode={mode}: the connection may be plain text; add "
                   "?sslmode=verify-full&sslrootcert=CA.pem to FLUKSIO_DATABASE_URL")


def artifacts_tls(settings: Settings) -> Finding:
    location = settings.artifacts_dir
    if not isinstance(location, str):
        return Finding("TLS: artifacts", INFO, f"a folder ({location}): no network connection of fluksio's")
    endpoint = settings.artifacts_endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and endpoint.startswith("http://"):
        return Finding("TLS: artifacts", WARN, f"{location} through {endpoint}: no TLS; use an https:// endpoint")
    return Finding("TLS: artifacts", OK, f"{location}: over HTTPS ({endpoint or 'the provider’s endpoint'})")


def secrets_findings(settings: Settings) -> list[Finding]:
    names = sorted(key[len(SECRET_ENV_PREFIX):] for key in os.environ if key.startswith(SECRET_ENV_PREFIX))
    found = [Finding("secrets: environment", INFO, f"{len(names)} here ({', '.join(names)})" if names else
                     "none in this process's environment")]
    folder = settings.secrets_dir
    if folder is None:
        return [*found, Finding("secrets: folder", INFO, "none (FLUKSIO_SECRETS_DIR unset)")]
    if not folder.is_dir():
        return [*found, Finding("secrets: folder", FAIL, f"FLUKSIO_SECRETS_DIR={folder} is not a folder here")]
    loose = [f"{path.name} ({stat.S_IMODE(path.stat().st_mode):04o})" for path in sorted(folder.iterdir())
             if path.is_file() and path.stat().st_mode & 0o077]
    if loose:
        return [*found, Finding("secrets: folder", FAIL, f"{folder}: readable by others, so refused: "
                                f"{', '.join(loose)}; chmod 600 them")]
    mode = stat.S_IMODE(folder.stat().st_mode)
    count = sum(1 for path in folder.iterdir() if path.is_file())
    if mode & 0o077:
        return [*found, Finding("secrets: folder", WARN, f"{folder} (mode {mode:04o}): others may list the secrets' "
                                f"names; chmod 700 it ({count} file(s), each its owner's only)")]
    return [*found, Finding("secrets: folder", OK, f"{folder}: {count} file(s), each its owner's only")]


def ui_findings(settings: Settings) -> list[Finding]:
    explorer = ("asks for FLUKSIO_UI_BASIC_AUTH's password, and may listen on any address" if settings.ui_basic_auth
                else "listens on loopback only: it refuses another address without a password (--basic-auth)")
    return [Finding("explorer", OK, f"`fluksio ui` {explorer}"),
            Finding("flower", INFO, "`fluksio flower` listens on 127.0.0.1 unless --address says otherwise; on "
                    "another address without --basic-auth it warns and does not mount the explorer")]
