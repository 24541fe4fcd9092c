"""``fluksio alerts``: what was sent and what failed, and a sample alert to check a rule."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click
from rich.text import Text

from fluksio.cli import render
from fluksio.settings import load_settings

if TYPE_CHECKING:
    from fluksio.schemas import AlertRecord

# The run store (SQLAlchemy) is imported by the commands that read it, not by `fluksio --help`.


@click.group()
def alerts() -> None:
    """Alerts: rules in config/alerts.json (FLUKSIO_ALERTS) that tell a webhook or a mailbox when runs end."""


@alerts.command("log")
@click.option("--rule", help="Only alerts of this rule.")
@click.option("--run", "run_id", metavar="RUN", help="Only alerts about this run (its full id).")
@click.option("--failed", is_flag=True, help="Only alerts that could not be sent.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def log(rule: str | None, run_id: str | None, failed: bool, limit: int, as_json: bool) -> None:
    """List alerts sent and failed, newest first."""
    from fluksio.store import alerts as alert_rows
    from fluksio.store.contact import open_run_store

    db = open_run_store(load_settings())
    try:
        records = alert_rows.list_alerts(db, rule=rule, run_id=run_id,
                                         outcome=alert_rows.FAILED if failed else None, limit=limit)
    finally:
        db.dispose()
    render.print_listing(records, as_json, "no alerts yet",
                         ("when", "rule", "run", "status", "target", "outcome", "tries", "error"), _alert_row)


def _alert_row(r: AlertRecord) -> list[str | Text]:
    from fluksio.store import alerts as alert_rows

    return [r.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"), r.rule, r.run_id or "(sample)", r.status,
            r.target, Text(r.outcome, style="green" if r.outcome == alert_rows.SENT else "red"), str(r.attempts),
            render.short(r.error or "", 80)]


@alerts.command("test")
@click.argument("rule")
def test(rule: str) -> None:
    """Send a sample alert through RULE now (one try), and say how it went; exit 1 if it failed."""
    from fluksio.store import alerts as alert_rows
    from fluksio.store.contact import open_run_store
    from fluksio.triggers.alerts import send_test

    settings = load_settings()
    db = open_run_store(settings)
    try:
        record = send_test(settings, db, rule)
    finally:
        db.dispose()
    if record.outcome == alert_rows.SENT:
        click.echo(f"sample alert of rule {rule} sent to {record.target}")
        return
    click.echo(f"sample alert of rule {rule} to {record.target} failed: {record.error}", err=True)
    sys.exit(1)
