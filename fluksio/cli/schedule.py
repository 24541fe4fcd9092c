"""``fluksio schedule``: add, list, pause, resume and remove the schedules every beat fires."""

from __future__ import annotations

from datetime import datetime

import click

from fluksio.cli import render
from fluksio.cli.connection import open_client
from fluksio.cli.params import parse_params, string_inputs
from fluksio.schemas import CatchUp, ScheduleRecord


def _when(value: datetime | None) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z") if value else "-"


def _rule(record: ScheduleRecord) -> str:
    if record.cron is not None:
        return f"cron {record.cron} ({record.tz})"
    return f"every {record.every_s} s"


@click.group()
def schedule() -> None:
    """Schedules: a run of a flow per cron or interval tick, fired by `fluksio beat`."""


@schedule.command("add")
@click.argument("name")
@click.argument("flow")
@click.option("--cron", metavar="EXPR", help="Five fields: minute hour day-of-month month day-of-week "
              "(e.g. '0 3 * * *': 03:00 every day).")
@click.option("--tz", metavar="ZONE", help="The time zone --cron is read in (an IANA name; default UTC).")
@click.option("--every", metavar="INTERVAL", help="An interval instead: 90s, 10m, 1h30m, 1d (ticks on its "
              "multiples since the Unix epoch).")
@click.option("-p", "--param", "params", multiple=True, metavar="NAME=VALUE",
              help="An input value; JSON when it parses, else a string. Repeatable.")
@click.option("--seed", type=int, help="Fills the flow's 'seed' input unless -p gives it.")
@click.option("--priority", type=int, default=0, show_default=True, help="The priority of the runs it starts.")
@click.option("--catchup", type=click.Choice([c.value for c in CatchUp]), default=CatchUp.LAST.value,
              show_default=True, help="Ticks missed while no beat ran: one run for the newest (last), none, "
              "or one each up to FLUKSIO_SCHEDULE_CATCHUP_LIMIT (all).")
def add(name: str, flow: str, cron: str | None, tz: str | None, every: str | None, params: tuple[str, ...],
        seed: int | None, priority: int, catchup: str) -> None:
    """Add schedule NAME: a run of FLOW (path/file.py:attr, package.module:attr or a registered name) per tick."""
    with open_client() as client:
        resolved = client.flow(flow)
        values = parse_params(params, string_inputs(resolved.inputs))
        record = client.schedule(name, resolved, cron=cron, tz=tz, every=every, params=values, seed=seed,
                                 priority=priority, catchup=catchup)
    click.echo(f"schedule {record.name}: {_rule(record)}, flow {record.flow}; next tick {_when(record.next_tick)}")


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_(as_json: bool) -> None:
    """List the schedules, with their last and next ticks."""
    with open_client() as client:
        records = client.schedules.list()
    render.print_listing(
        records, as_json, "no schedules; `fluksio schedule add NAME FLOW --cron … | --every …` adds one",
        ("name", "flow", "when", "params", "catchup", "state", "last tick", "next tick"), _schedule_row)


def _schedule_row(r: ScheduleRecord) -> list[str]:
    params = ", ".join(f"{k}={render.short(v, 20)}" for k, v in r.params.items())
    if r.seed is not None:
        params = f"{params}, seed={r.seed}" if params else f"seed={r.seed}"
    return [r.name, r.flow, _rule(r), params or "-", r.catchup.value, "paused" if r.paused else "active",
            _when(r.last_tick), _when(r.next_tick)]


@schedule.command()
@click.argument("name")
def pause(name: str) -> None:
    """Stop NAME from firing until it is resumed."""
    with open_client() as client:
        client.schedules.pause(name)
    click.echo(f"schedule {name}: paused")


@schedule.command()
@click.argument("name")
def resume(name: str) -> None:
    """Let NAME fire again (ticks missed while paused get its catch-up policy)."""
    with open_client() as client:
        record = client.schedules.resume(name)
    click.echo(f"schedule {name}: active; next tick {_when(record.next_tick)}")


@schedule.command()
@click.argument("name")
def remove(name: str) -> None:
    """Remove NAME (the runs it started keep its name)."""
    with open_client() as client:
        client.schedules.remove(name)
    click.echo(f"schedule {name}: removed")
