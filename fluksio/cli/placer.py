"""``fluksio placer``: machines, what is free, what waits (in the order it will be granted), pools, provisioners."""

from __future__ import annotations

import json

import click

from fluksio.cli import render
from fluksio.cli.connection import open_client


@click.command()
@click.option("--json", "as_json", is_flag=True)
def placer(as_json: bool) -> None:
    """Show the machines the placer knows, what is free, what waits (in the order it will be granted), and
    each pool's use."""
    with open_client() as client:
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
