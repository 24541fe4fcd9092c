"""The ``fluksio`` command."""

from __future__ import annotations

import contextlib
import gc
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fluksio.cli import render
from fluksio.cli.connection import lost_connection, open_client, run_store_alone
from fluksio.cli.params import parse_grid, parse_params, parse_seeds, string_inputs
from fluksio.errors import FluksioError, RunRejected, did_you_mean, first_line
from fluksio.schemas import RunRecord, RunStatus, unit_of

if TYPE_CHECKING:
    from fluksio.cli import live
    from fluksio.client import Client, RunHandle
    from fluksio.flows.package import PackedFile

# A command imports what only it needs (the client and Celery, the live display) when it runs: `fluksio --help`
# and `fluksio runs` start without them (tests/unit/cli/test_cli_start.py).

#: Exit codes: a run that did not end ``ok``, and input fluksio refused.
EXIT_RUN_FAILED, EXIT_BAD_INPUT, EXIT_TIMED_OUT, EXIT_INTERRUPTED = 1, 2, 124, 130
#: How often the live display re-reads the run, in seconds.
REFRESH_S = 0.2


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
    from rich.text import Text

    # soft_wrap: one line, however long (the terminal folds it; a log or a pipe keeps it whole).
    render.console(stderr=True).print(Text.assemble(("error:", "red"), " ", line), soft_wrap=True)


@click.group(cls=FluksioGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fluksio")
def cli() -> None:
    """Run graphs of Python functions as recorded, cached, cancellable runs."""


def _client() -> Client:
    return open_client()


def _wait_live(client: Client, handle: RunHandle, total: int, timeout: float | None, quiet: bool,
               activity: live.RunActivity | None = None) -> None:
    from rich.live import Live

    from fluksio.cli import live

    deadline = None if timeout is None else time.monotonic() + timeout
    out = render.console(stderr=True)
    try:
        screen = Live(console=out, refresh_per_second=8, transient=True)
        show = not quiet and out.is_terminal
        with screen if show else contextlib.nullcontext(), client.watch_end(handle.id) as ended:
            while True:
                record = client.get(handle.id)
                if show:
                    latest = client.series.newest(handle.id)
                    screen.update(live.progress_view(record, total, latest, activity))
                if record.status.is_terminal():
                    return
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"run {handle.id} still {record.status.value} after {timeout:g} s")
                if ended.wait(REFRESH_S):  # a run driven here (embedded) ends the pause at once
                    ended.clear()
    except KeyboardInterrupt:
        client.cancel(handle.id, "interrupted at the terminal (Ctrl-C)")
        out.print(f"cancelling run {handle.id} …")
        try:
            handle.wait(timeout=30)
        except TimeoutError:  # its calls are still stopping: the cancel stands, the command is done
            out.print(f"run {handle.id} is still stopping; `fluksio show {handle.id}` says when it has")
        raise


def _finish(client: Client, run_id: str, as_json: bool) -> None:
    record = client.get(run_id)
    if as_json:
        click.echo(record.model_dump_json(indent=2))
    else:
        render.console().print(render.run_summary(record, client.metrics(run_id), client.artifacts(run_id)))
    sys.exit(0 if record.status is RunStatus.OK else EXIT_RUN_FAILED)


def _run(flow_ref: str, params: tuple[str, ...], seed: int | None, group: str | None, no_cache: bool,
         detach: bool, timeout: float | None, as_json: bool, priority: int = 0, code: str | None = None) -> None:
    from fluksio.cli import live

    with _client() as client:
        if detach and client.settings.embedded:
            raise click.UsageError("--detach needs a shared broker (FLUKSIO_BROKER_URL); the embedded default "
                                   "runs inside this command and stops with it")
        flow = client.flow(flow_ref) if code is None else client.packaged_flow(_flow_name(client, flow_ref), code)
        values = parse_params(params, string_inputs(flow.inputs))
        watching = not (detach or as_json)
        # Listen before submitting: in the embedded default the first calls may start before submit returns.
        activity = live.RunActivity() if watching else None
        unsubscribe = client.subscribe(activity.observe) if activity else (lambda: None)
        try:
            handle = client.submit(flow if code is None else flow.name, values, seed=seed, group=group,
                                   no_cache=no_cache, priority=priority, code=code)
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
@click.option("--code", metavar="DIGEST", help="Run an earlier code package of the flow unchanged (its digest, as "
              "`fluksio show` prints it); FLOW is then the flow's name.")
def run(flow: str, params: tuple[str, ...], seed: int | None, group: str | None, no_cache: bool, detach: bool,
        timeout: float | None, as_json: bool, priority: int, code: str | None) -> None:
    """Run FLOW (path/file.py:attr, package.module:attr or a registered name) and wait for it.

    Its code travels with the run: workers that trust it run exactly these files, with no restart.
    Exits 0 only when the run ends ok.
    """
    _run(flow, params, seed, group, no_cache, detach, timeout, as_json, priority, code)


def _flow_name(client: Client, flow_ref: str) -> str:
    """The flow's name in ``run FLOW --code``: FLOW itself, or the name of the flow a reference loads."""
    return client.flow(flow_ref).name if ":" in flow_ref or flow_ref.endswith(".py") else flow_ref


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
        resolved = client.flow(flow)
        fixed = parse_params(params, string_inputs(resolved.inputs))
        result = client.sweep(resolved, parse_grid(grid), parse_seeds(seeds), fixed, no_cache, priority)
        render.console(stderr=True).print(f"group [bold]{result.group_id}[/bold]: {len(result.runs)} run(s)")
        records = result.wait()
        latest = client.latest_metrics([r.id for r in records])
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
    with _collector_paused():
        _list_runs(flow, status, group, schedule_name, parent, limit, as_json)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a short command imports and runs: its imports (SQLAlchemy's, most of
    all) make objects that live until the process ends, and the collector's passes over them, finding nothing
    to free, cost ~0.1 s of `fluksio runs` (benchmarks/cli_start.py). Restored after, for a caller in-process."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _list_runs(flow: str | None, status: str | None, group: str | None, schedule_name: str | None,
               parent: str | None, limit: int, as_json: bool) -> None:
    from fluksio.runs.listing import list_records
    from fluksio.runs.metrics import latest_values_of_runs
    from fluksio.settings import load_settings

    settings = load_settings()
    # The run store alone, as `client.runs()` reads it: a listing needs no client (and no Celery).
    with run_store_alone(settings) as db:
        records = list_records(db, settings.stale_after_s, flow=flow, status=status, group=group, limit=limit,
                               schedule=schedule_name, parent=parent)
        latest = latest_values_of_runs(db, [r.id for r in records])
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
            rows = [n for n in record.nodes if logs_of in (n.node, unit_of(n.node, n.index))]
            if not rows:
                names = list(dict.fromkeys(n.node for n in record.nodes))
                raise click.BadParameter(f"run {record.id} has no node {logs_of!r} (nodes: {', '.join(names)}; an "
                                         f"element of a mapped node is node[i]){did_you_mean(logs_of, names)}",
                                         param_hint="--logs")
            for row in rows:
                click.echo(f"── {unit_of(row.node, row.index)} attempt {row.attempt} ({row.status.value}) ──")
                click.echo(row.logs or "(no output)")
            return
        if as_json:
            click.echo(record.model_dump_json(indent=2))
            return
        files = _code_files(client, record)
        render.console().print(render.run_summary(record, client.metrics(record.id), client.artifacts(record.id),
                                                  files))


def _code_files(client: Client, record: RunRecord) -> list[PackedFile] | None:
    """The files of the run's code package, or ``None`` when it did not travel or is gone (said, not raised)."""
    if record.code_entry is None:
        return None
    try:
        return client.code_files(record.id)
    except FluksioError as exc:
        render.console(stderr=True).print(f"[yellow]the run's code package cannot be read:[/yellow] {exc}")
        return None


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
        total = len(client.flow(record.flow).nodes) if record.flow in client.flows() else len(
            {n.node for n in record.nodes})
        try:
            _wait_live(client, handle, total, None, quiet=as_json)
        except KeyboardInterrupt:
            sys.exit(EXIT_INTERRUPTED)
        _finish(client, handle.id, as_json)


@cli.command()
@click.argument("run_id")
def cancel(run_id: str) -> None:
    """Cancel a run: a queued one never starts, a running one stops scheduling and its calls are killed.

    A run that had already finished is left as it is, said on stderr, with exit status 2.
    """
    with _client() as client:
        record = client.get(run_id, nodes=False)
        if not record.status.is_terminal():
            status = client.cancel(record.id)
            if status is RunStatus.RUNNING:
                click.echo(f"run {record.id}: cancelling (it stops scheduling; its running calls are killed)")
                return
            if status is RunStatus.CANCELLED:  # it was queued: cancelled now, nothing of it ran
                click.echo(f"run {record.id}: cancelled")
                return
            record = client.get(record.id, nodes=False)  # it ended between the look and the cancel
        reason = f" ({first_line(record.status_reason)})" if first_line(record.status_reason) else ""
        raise RunRejected(f"run {record.id} had already finished: {record.status}{reason}; nothing to cancel")


from fluksio.cli.alerts import alerts  # noqa: E402
from fluksio.cli.beat import beat  # noqa: E402
from fluksio.cli.code import code  # noqa: E402
from fluksio.cli.flower import flower  # noqa: E402
from fluksio.cli.metrics_server import metrics_server  # noqa: E402
from fluksio.cli.placer import placer  # noqa: E402
from fluksio.cli.plot import plot  # noqa: E402
from fluksio.cli.schedule import schedule  # noqa: E402
from fluksio.cli.security import security  # noqa: E402
from fluksio.cli.stored import artifact, db  # noqa: E402
from fluksio.cli.ui import ui  # noqa: E402
from fluksio.cli.watch import watch  # noqa: E402
from fluksio.cli.worker import worker  # noqa: E402

cli.add_command(placer)
cli.add_command(worker)
cli.add_command(artifact)
cli.add_command(db)
cli.add_command(flower)
cli.add_command(watch)
cli.add_command(plot)
cli.add_command(schedule)
cli.add_command(beat)
cli.add_command(alerts)
cli.add_command(ui)
cli.add_command(security)
cli.add_command(code)
cli.add_command(metrics_server)


def main() -> None:
    """The ``fluksio`` console script."""
    try:
        cli(prog_name="fluksio")
    finally:
        # What the imports made lives until the process ends: frozen, it is left out of the collector's last
        # pass over every object at exit, which took 0.1–0.15 s of `fluksio runs` (benchmarks/cli_start.py).
        # An object in a cycle still alive now is then not finalized, which Python never promises at exit;
        # nothing of fluksio's relies on it (stores and clients are closed by then, atexit handlers still run).
        gc.freeze()


if __name__ == "__main__":
    main()
