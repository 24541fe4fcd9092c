"""``fluksio worker``: the Celery worker of one machine (node calls; drivers with ``--drivers``)."""

from __future__ import annotations

import os
from typing import get_args

import click

from fluksio.settings import Settings, load_settings

#: What ``--accept-code`` takes: the values of the setting it sets, FLUKSIO_ACCEPT_CODE.
ACCEPT_CODE = get_args(Settings.model_fields["accept_code"].annotation)


@click.command()
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
@click.option("--accept-code", type=click.Choice(ACCEPT_CODE),
              help="Which code runs here (sets FLUKSIO_ACCEPT_CODE): registered (only the flows FLUKSIO_FLOWS "
                   "loads; the default), signed (also code packages shipped with a run and signed by a certificate "
                   "FLUKSIO_SIGNING_CERT_STORE trusts) or any (any shipped package: anyone who can write your Redis "
                   "can run code here).")
@click.option("--private-store", is_flag=True,
              help="Start without FLUKSIO_DATABASE_URL, journaling into this host's default SQLite file, which no "
                   "other process reads (a worker is refused without it otherwise).")
@click.option("--loglevel", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def worker(name: str | None, labels: str | None, cpus: int | None, gpus: str | None, ram_mb: int | None,
           drivers: bool, drivers_only: bool, beat: bool, profile: str | None, idle_timeout: float | None,
           accept_code: str | None, private_store: bool, loglevel: str) -> None:
    """Run a Celery worker for this machine: node calls on <label>@<name> queues, drivers with --drivers."""
    from fluksio.worker.inventory import build_inventory
    from fluksio.worker.profile import WorkerProfile, load_profile
    from fluksio.worker.service import run_driver_worker, run_node_worker

    base = load_profile(profile) if profile else WorkerProfile()
    accept_code = accept_code or base.accept_code
    if accept_code is not None:
        # Through the environment, not only this process's settings: the fork server (and its package servers)
        # and the drivers' process this command starts read their settings from it too.
        os.environ["FLUKSIO_ACCEPT_CODE"] = accept_code
    settings = load_settings()
    inventory = build_inventory(
        name or base.name, labels if labels is not None else ",".join(base.labels), cpus or base.cpus,
        gpus if gpus is not None else base.gpus_text, ram_mb if ram_mb is not None else base.ram_mb,
    )
    drivers = drivers or base.drivers
    if drivers_only:
        run_driver_worker(settings, inventory.name, loglevel.upper(), with_beat=beat, private_store=private_store)
    else:
        run_node_worker(settings, inventory, drivers, loglevel.upper(), idle_timeout_s=idle_timeout, with_beat=beat,
                        private_store=private_store)
