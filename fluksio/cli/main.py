"""The ``fluksio`` command."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.live import Live
from rich.text import Text

from fluksio.cli import render
from fluksio.cli.connection import lost_connection, open_client
from fluksio.cli.params import parse_grid, parse_params, parse_seeds, string_inputs
from fluksio.client import Client, RunHandle
from fluksio.errors import FluksioError
from fluksio.runs.contact import open_run_store
from fluksio.runs.metrics import latest_of, series_of
from fluksio.schemas import RunStatus
from fluksio.settings import load_settings
from fluksio.store.metrics import latest_metrics
from fluksio.store.nodes import artifacts_of

#: Exit codes: a run that did not end ``ok``, and input fluksio refused.
EXIT_RUN_FAILED, EXIT_BAD_INPUT, EXIT_TIMED_OUT, EXIT_INTERRUPTED = 1, 2, 124, 130
#: How often the live display re-reads the run, in seconds.
REFRESH_S = 0.2
#: Bytes copied per step when an artifact streams to a file.
STREAM_CHUNK = 1 << 20


class FluksioGroup(click.Group):
    """Turns a :class:`FluksioError` (or a connection lost for good) into one readable line and exit code 2,
    never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FluksioError as exc:
            _say_error(str(exc))
            ctx.exit(EXIT_BAD_INPUT)
        except Exception as exc:
            line = lost_connection(exc)
            if line is None:
                raise
            _say_error(line)
            ctx.exit(EXIT_BAD_INPUT)


def _say_error(line: str) -> None:
    # soft_wrap: one line, however long (the terminal folds it; a log or a pipe keeps it whole).
    render.console(stderr=True).print(Text.assemble(("error:", "red"), " ", line), soft_wrap=True)


@click.group(cls=FluksioGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fluksio")
def cli() -> None:
    """Run graphs of Python functions as recorded, cached, cancellable runs."""


def _client() -> Client:
    return open_client()


def _wait_live(client: Client, handle: RunHandle, total: int, timeout: float | None, quiet: bool,
               activity: render.RunActivity | None = None) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    out = render.console(stderr=True)
    try:
        live = Live(console=out, refresh_per_second=8, transient=True)
        show = not quiet and out.is_terminal
        with live if show else contextlib.nullcontext():
            while True:
                record = client.get(handle.id)
                if show:
                    latest = latest_metrics(client.runtime.db, handle.id)
                    live.update(render.progress_view(record, total, latest, activity))
                if record.status.is_terminal():
                    return
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"run {handle.id} still {record.status.value} after {timeout:g} s")
                time.sleep(REFRESH_S)
    except KeyboardInterrupt:
        client.cancel(handle.id, "interrupted at the terminal (Ctrl-C)")
        out.print(f"cancelling run {handle.id} …")
        handle.wait(timeout=30)
        raise


def _finish(client: Client, run_id: str, as_json: bool) -> None:
    record = client.get(run_id)
    if as_json:
        click.echo(record.model_dump_json(indent=2))
    else:
        db = client.runtime.db
        render.console().print(render.run_summary(record, series_of(db, run_id), artifacts_of(db, run_id)))
    sys.exit(0 if record.status is RunStatus.OK else EXIT_RUN_FAILED)


def _run(flow_ref: str, params: tuple[str, ...], seed: int | None, group: str | None, no_cache: bool,
         detach: bool, timeout: float | None, as_json: bool, priority: int = 0) -> None:
    with _client() as client:
        if detach and client.settings.embedded:
            raise click.UsageError("--detach needs a shared broker (FLUKSIO_BROKER_URL); the embedded default "
                                   "runs inside this command and stops with it")
        flow = client.runtime.registry.resolve(flow_ref)
        values = parse_params(params, string_inputs(flow.inputs))
        watching = not (detach or as_json)
        # Listen before submitting: in the embedded default the first calls may start before submit returns.
        activity = render.RunActivity() if watching else None
        unsubscribe = client.runtime.events.subscribe(activity.observe) if activity else (lambda: None)
        try:
            handle = client.submit(flow, values, seed=seed, group=group, no_cache=no_cache, priority=priority)
            if detach:
                click.echo(handle.id)
                return
            if activity is not None:
                activity.run_id = handle.id
            if not as_json:
                render.console(stderr=True).print(f"run [bold]{handle.id}[/bold] of flow {flow.name} submitted")
            try:
                _wait_live(client, handle, len(flow.nodes), timeout, quiet=as_json, activity=activity)
            except KeyboardInterrupt:
                sys.exit(EXIT_INTERRUPTED)
            except TimeoutError as exc:
                after = ("it goes on; `fluksio show` it later" if not client.settings.embedded else
                         "this command ran it in-process, so it ends `abandoned` now; `fluksio resume` continues it")
                render.console(stderr=True).print(f"[yellow]timed out:[/yellow] {exc}; {after}")
                sys.exit(EXIT_TIMED_OUT)
        finally:
            unsubscribe()
        _finish(client, handle.id, as_json)


@cli.command()
@click.argument("flow")
@click.option("-p", "--param", "params", multiple=True, metavar="NAME=VALUE",
              help="An input value; JSON when it parses (3, 0.1, [1,2]), else a string. Repeatable.")
@click.option("--seed", type=int, help="Fills the flow's 'seed' input unless -p gives it.")
@click.option("--group", help="Group id to file the run under.")
@click.option("--no-cache", is_flag=True, help="Run every node even if an earlier run has its outputs.")
@click.option("--detach", is_flag=True, help="Print the run id and return at once (distributed mode).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True),
              help="Stop waiting after this many seconds (exit 124; an embedded run is left abandoned).")
@click.option("--json", "as_json", is_flag=True, help="Print the finished run as JSON.")
@click.option("--priority", type=int, default=0, show_default=True,
              help="Waiting calls of higher-priority runs are granted first.")
def run(flow: str, params: tuple[str, ...], seed: int | None, group: str | None, no_cache: bool, detach: bool,
        timeout: float | None, as_json: bool, priority: int) -> None:
    """Run FLOW (path/file.py:attr, package.module:attr or a registered name) and wait for it.

    Exits 0 only when the run ends ok.
    """
    _run(flow, params, seed, group, no_cache, detach, timeout, as_json, priority)


@cli.command()
@click.option("-p", "--param", "params", multiple=True, metavar="NAME=VALUE", help="Override a demo input.")
@click.option("--seed", type=int, default=0, show_default=True)
def demo(params: tuple[str, ...], seed: int) -> None:
    """Train the demo model (examples/demo.py) on the embedded default."""
    source = Path(__file__).resolve().parents[2] / "examples" / "demo.py"
    if not source.is_file():
        raise click.ClickException(f"the demo flow is not at {source}; it ships with fluksio's source checkout")
    try:
        _run(f"{source}:flow", params, seed, None, False, False, None, False)
    except SystemExit as done:  # the run ended (ok or not) and was shown: say where to look at it next
        if done.code in (0, EXIT_RUN_FAILED):
            click.echo(explorer_hint(), err=True)
        raise


def explorer_hint() -> str:
    """Where to look at runs in a browser (said after the demo)."""
    import importlib.util

    command = "fluksio ui" if importlib.util.find_spec("tornado") else "pip install 'fluksio[ui]' && fluksio ui"
    return f"see it in a browser: {command}, then open http://127.0.0.1:8585/"


@cli.command()
@click.argument("flow")
@click.option("-g", "--grid", "grid", multiple=True, required=True, metavar="NAME=V1,V2",
              help="Values of one input to sweep over. Repeatable: the runs are the cartesian product.")
@click.option("--seeds", help="Seeds, comma-separated; each grid point runs once per seed.")
@click.option("-p", "--param", "params", multiple=True, metavar="NAME=VALUE", help="A fixed input value.")
@click.option("--no-cache", is_flag=True)
@click.option("--priority", type=int, default=0, show_default=True,
              help="Waiting calls of higher-priority runs are granted first.")
def sweep(flow: str, grid: tuple[str, ...], seeds: str | None, params: tuple[str, ...], no_cache: bool,
          priority: int) -> None:
    """Run FLOW once per combination of grid values (and seeds), as one group."""
    with _client() as client:
        resolved = client.runtime.registry.resolve(flow)
        fixed = parse_params(params, string_inputs(resolved.inputs))
        result = client.sweep(resolved, parse_grid(grid), parse_seeds(seeds), fixed, no_cache, priority)
        render.console(stderr=True).print(f"group [bold]{result.group_id}[/bold]: {len(result.runs)} run(s)")
        records = result.wait()
        latest = {r.id: {n: v for n, (_s, v) in latest_of(client.runtime.db, r.id).items()} for r in records}
        out = render.console()
        out.print(render.runs_table(records, latest, width=out.width))
        sys.exit(0 if all(r.status is RunStatus.OK for r in records) else EXIT_RUN_FAILED)


@cli.command()
@click.option("--flow", help="Only runs of this flow.")
@click.option("--status", type=click.Choice([s.value for s in RunStatus]), help="Only runs in this status.")
@click.option("--group", help="Only runs of this group (a sweep).")
@click.option("--schedule", "schedule_name", metavar="NAME", help="Only runs that schedule's ticks started.")
@click.option("--parent", metavar="RUN", help="Only the child runs of RUN (its subflow calls).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def runs(flow: str | None, status: str | None, group: str | None, schedule_name: str | None, parent: str | None,
         limit: int, as_json: bool) -> None:
    """List runs, newest first."""
    with _client() as client:
        records = client.runs(flow=flow, status=status, group=group, limit=limit, schedule=schedule_name,
                              parent=parent)
        latest = {r.id: {n: v for n, (_s, v) in latest_of(client.runtime.db, r.id).items()} for r in records}
        if as_json:
            click.echo(json.dumps([{**json.loads(r.model_dump_json()), "metrics": latest[r.id]} for r in records],
                                  indent=2))
            return
        out = render.console()
        out.print(render.runs_table(records, latest if group else None, width=out.width))


@cli.command()
@click.argument("run_id")
@click.option("--logs", "logs_of", metavar="NODE", help="Print the captured logs of NODE.")
@click.option("--json", "as_json", is_flag=True)
def show(run_id: str, logs_of: str | None, as_json: bool) -> None:
    """Show a run: its nodes, metrics, artifacts and result."""
    with _client() as client:
        record = client.get(run_id)
        if logs_of:
            # A node's name shows every row of it (each element of a mapped node); `count[3]` one element's.
            rows = [n for n in record.nodes if logs_of in (n.node, _unit(n.node, n.index))]
            if not rows:
                names = ", ".join(dict.fromkeys(n.node for n in record.nodes))
                raise click.BadParameter(f"run {record.id} has no node {logs_of!r} (nodes: {names}; an element of "
                                         "a mapped node is node[i])", param_hint="--logs")
            for row in rows:
                click.echo(f"── {_unit(row.node, row.index)} attempt {row.attempt} ({row.status.value}) ──")
                click.echo(row.logs or "(no output)")
            return
        if as_json:
            click.echo(record.model_dump_json(indent=2))
            return
        db = client.runtime.db
        render.console().print(render.run_summary(record, series_of(db, record.id), artifacts_of(db, record.id)))


def _unit(node: str, index: int | None) -> str:
    return node if index is None else f"{node}[{index}]"


@cli.command()
@click.argument("run_id")
@click.option("--detach", is_flag=True, help="Return at once (distributed mode).")
@click.option("--json", "as_json", is_flag=True)
def resume(run_id: str, detach: bool, as_json: bool) -> None:
    """Re-drive a run that ended error, cancelled or abandoned: succeeded nodes are kept, the rest run."""
    with _client() as client:
        if detach and client.settings.embedded:
            raise click.UsageError("--detach needs a shared broker; the embedded default runs inside this command")
        handle = client.resume(run_id)
        record = client.get(handle.id)
        if detach:
            click.echo(handle.id)
            return
        if not as_json:
            render.console(stderr=True).print(f"run [bold]{handle.id}[/bold] resumed from {record.resumed_from}")
        names = client.runtime.registry.names()
        total = len(client.runtime.registry.get(record.flow).nodes) if record.flow in names else len(
            {n.node for n in record.nodes})
        try:
            _wait_live(client, handle, total, None, quiet=as_json)
        except KeyboardInterrupt:
            sys.exit(EXIT_INTERRUPTED)
        _finish(client, handle.id, as_json)


@cli.command()
@click.argument("run_id")
def cancel(run_id: str) -> None:
    """Cancel a run: a queued one never starts, a running one stops scheduling."""
    with _client() as client:
        status = client.cancel(run_id)
        record = client.get(run_id)
        click.echo(f"run {record.id}: {status.value}")


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def placer(as_json: bool) -> None:
    """Show the machines the placer knows, what is free, what waits (in the order it will be granted), and
    each pool's use."""
    with _client() as client:
        snapshot = client.placement()
    if as_json:
        click.echo(json.dumps(snapshot, indent=2))
        return
    from rich.table import Table

    out = render.console()
    table = Table(show_edge=False, header_style="bold", title="machines", title_justify="left")
    for column in ("machine", "labels", "cpus free/total", "gpus free/total", "ram free/total MB", "calls",
                   "heartbeat"):
        table.add_column(column)
    for m in snapshot["machines"]:
        beat = "-" if m["heartbeat_age_s"] is None else f"{m['heartbeat_age_s']:.1f}s ago"
        table.add_row(m["name"], ",".join(m["labels"]), f"{m['free']['cpus']}/{m['total']['cpus']}",
                      f"{','.join(map(str, m['free_gpu_ids'])) or '-'} / {','.join(map(str, m['gpu_ids'])) or '-'}",
                      f"{m['free']['ram_mb']}/{m['total']['ram_mb']}", str(m["calls"]), beat)
    out.print(table if snapshot["machines"] else "no machines attached")
    if snapshot["waiting"]:
        # In the order they will be granted: highest priority first, then the longest waiting.
        waiting = Table(show_edge=False, header_style="bold", title="waiting, in the order granted",
                        title_justify="left")
        for column in ("#", "run", "node", "priority", "pool", "for", "why"):
            waiting.add_column(column, justify="right" if column in ("#", "priority") else "left")
        for turn, w in enumerate(snapshot["waiting"], 1):
            waiting.add_row(str(turn), w["run_id"] or "", w["node"] or "", str(w.get("priority", 0)),
                            w.get("pool") or "", f"{w['waiting_s']:.1f}s", w["reason"])
        out.print(waiting)
    else:
        out.print("nothing waiting")
    if snapshot.get("pools"):
        pools = Table(show_edge=False, header_style="bold", title="pools", title_justify="left")
        for column in ("pool", "in use", "held by"):
            pools.add_column(column)
        for p in snapshot["pools"]:
            pools.add_row(p["name"], f"{p['in_use']}/{p['slots']}", render.name_list(p["calls"]))
        out.print(pools)
    if snapshot["provisioners"] and "profile" in snapshot["provisioners"][0]:
        profiles = Table(show_edge=False, header_style="bold", title="provisioners", title_justify="left")
        for column in ("profile", "labels", "state", "job", "slurm state", "pending", "note"):
            profiles.add_column(column)
        for p in snapshot["provisioners"]:
            pending = f"{p['pending_s']:.0f}s" if p.get("pending_s") is not None else ""
            profiles.add_row(p["profile"], ",".join(p.get("labels") or []), p.get("state") or "",
                             str(p.get("job_id") or ""), p.get("job_state") or "", pending, p.get("reason") or "")
        out.print(profiles)


@cli.command()
@click.option("--name", help="Machine name (default: the host name); also a label.")
@click.option("--labels", help="Labels this machine carries, comma-separated (e.g. gpu,a100).")
@click.option("--cpus", type=int, help="CPUs to offer (default: the host's); also the node pool's size.")
@click.option("--gpus", help="GPU ids to offer, e.g. 0,1, or 'none' (default: detected with nvidia-smi).")
@click.option("--ram-mb", type=int, help="RAM to offer, in MB (default: the host's).")
@click.option("--drivers", is_flag=True, help="Also run drivers, in a process and pool of their own.")
@click.option("--drivers-only", is_flag=True, help="Run only drivers (no node calls).")
@click.option("--beat", is_flag=True, help="Also run `fluksio beat` (the schedules), in a process of its own.")
@click.option("--profile", type=click.Path(dir_okay=False), help="A worker profile (TOML); flags override it.")
@click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True),
              help="Exit after this many seconds without a node call (for provisioned workers).")
@click.option("--loglevel", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def worker(name: str | None, labels: str | None, cpus: int | None, gpus: str | None, ram_mb: int | None,
           drivers: bool, drivers_only: bool, beat: bool, profile: str | None, idle_timeout: float | None,
           loglevel: str) -> None:
    """Run a Celery worker for this machine: node calls on <label>@<name> queues, drivers with --drivers."""
    from fluksio.worker.inventory import build_inventory
    from fluksio.worker.profile import WorkerProfile, load_profile
    from fluksio.worker.service import run_driver_worker, run_node_worker

    settings = load_settings()
    base = load_profile(profile) if profile else WorkerProfile()
    inventory = build_inventory(
        name or base.name, labels if labels is not None else ",".join(base.labels), cpus or base.cpus,
        gpus if gpus is not None else base.gpus_text, ram_mb if ram_mb is not None else base.ram_mb,
    )
    drivers = drivers or base.drivers
    if drivers_only:
        run_driver_worker(settings, inventory.name, loglevel.upper(), with_beat=beat)
    else:
        run_node_worker(settings, inventory, drivers, loglevel.upper(), idle_timeout_s=idle_timeout, with_beat=beat)


@cli.group()
def artifact() -> None:
    """Artifacts: bytes nodes made, stored under their sha256."""


@artifact.command("get")
@click.argument("digest")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, writable=True), required=True,
              help="File to write the bytes to ('-' for standard output).")
def artifact_get(digest: str, output: str) -> None:
    """Write the bytes of artifact DIGEST (sha256:…) to a file, streamed and checked against the digest."""
    from fluksio.artifacts.artifact import validate_digest
    from fluksio.artifacts.factory import open_store

    store = open_store(load_settings(), check=True)
    with store.open(validate_digest(digest)) as source:
        if output == "-":
            # Bytes already written cannot be taken back: a copy found corrupt at its end exits non-zero.
            shutil.copyfileobj(source, sys.stdout.buffer, STREAM_CHUNK)
            return
        target = Path(output)
        partial = target.with_name(f".{target.name}.partial")
        try:
            with partial.open("wb") as handle:
                shutil.copyfileobj(source, handle, STREAM_CHUNK)
            partial.replace(target)  # only a checked, whole copy gets the name asked for
        finally:
            partial.unlink(missing_ok=True)
    click.echo(f"wrote {target.stat().st_size} bytes to {output}", err=True)


@cli.group()
def db() -> None:
    """The run store."""


@db.command()
def upgrade() -> None:
    """Create or upgrade the run store's tables to the newest schema."""
    database = open_run_store(load_settings(), upgrade=False)
    before = database.current_revision()
    database.upgrade()
    click.echo(f"run store at revision {database.current_revision()} (was {before or 'empty'})")
    database.dispose()


from fluksio.cli.alerts import alerts  # noqa: E402
from fluksio.cli.beat import beat  # noqa: E402
from fluksio.cli.flower import flower  # noqa: E402
from fluksio.cli.plot import plot  # noqa: E402
from fluksio.cli.schedule import schedule  # noqa: E402
from fluksio.cli.security import security  # noqa: E402
from fluksio.cli.ui import ui  # noqa: E402
from fluksio.cli.watch import watch  # noqa: E402

cli.add_command(flower)
cli.add_command(watch)
cli.add_command(plot)
cli.add_command(schedule)
cli.add_command(beat)
cli.add_command(alerts)
cli.add_command(ui)
cli.add_command(security)


def main() -> None:
    cli(prog_name="fluksio")


if __name__ == "__main__":
    main()
