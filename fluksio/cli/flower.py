"""``fluksio flower``: Flower, the Celery dashboard, on the installation's broker.

The command checks its arguments and starts Flower; what Flower is told about
fluksio (names, events) lives in :mod:`fluksio.worker.flower`. Flower is an
optional extra (``pip install 'fluksio[flower]'``).
"""

from __future__ import annotations

import sys

import click
from rich.text import Text

from fluksio.cli import render
from fluksio.settings import is_loopback, load_settings, redact_url

#: Exit code when Flower cannot be started as asked.
EXIT_BAD_INPUT = 2
#: Columns of Flower's tasks page: a driver's args are its run id, a node call's kwargs its node and run id.
TASKS_COLUMNS = "name,state,args,kwargs,worker,received,started,runtime,uuid"

MISSING_FLOWER = ("fluksio flower runs Flower, which is not installed here; install it with "
                  "pip install 'fluksio[flower]' (or pip install flower)")


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=5555, show_default=True)
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Address to listen on; 0.0.0.0 lets other hosts in (give them --basic-auth).")
@click.option("--basic-auth", "basic_auth", multiple=True, metavar="USER:PASSWORD",
              help="Ask for this user and password. Repeatable.")
@click.option("--url-prefix", help="Serve under this path (behind a reverse proxy), e.g. flower.")
def flower(port: int, address: str, basic_auth: tuple[str, ...], url_prefix: str | None) -> None:
    """Start Flower, the Celery dashboard, against this installation's broker."""
    argv = flower_argv(port, address, basic_auth, url_prefix)
    settings = load_settings()
    try:
        import flower as _flower  # noqa: F401 - only to say clearly that it is missing
    except ImportError:
        render.console(stderr=True).print(Text.assemble(("error:", "red"), " ", MISSING_FLOWER))
        sys.exit(EXIT_BAD_INPUT)
    from fluksio.ui.flower import MOUNT, mount_in_flower
    from fluksio.worker.flower import flower_app, prepare_flower

    app = flower_app(settings)
    from fluksio.runtime import check_installation

    # Broker and run store (the explorer mounted in Flower reads it): an unreachable one is said now, in
    # one line, not by an empty dashboard or a traceback from inside Flower.
    check_installation(settings)
    mount_in_flower(settings)  # the run explorer under /fluksio/, linked from Flower's navigation
    if not basic_auth and not is_loopback(address):
        render.console(stderr=True).print(Text.assemble(
            ("warning:", "yellow"), f" Flower on {address} without --basic-auth lets anyone who reaches port "
            f"{port} see every run's arguments and revoke tasks"))
    try:
        prepare_flower(app)
    except Exception as exc:  # kombu's errors differ by transport; Flower asks again itself anyway
        render.console(stderr=True).print(Text.assemble(
            ("warning:", "yellow"), f" could not ask the workers for task events yet ({type(exc).__name__}: {exc}); "
            "Flower asks them again every 5 s"))
    root = f"http://{address}:{port}/" + (f"{url_prefix.strip('/')}/" if url_prefix else "")
    explorer = (f"the run explorer at {root}{MOUNT}/" if basic_auth or is_loopback(address) else
                "the run explorer is not mounted (it can cancel runs: give --basic-auth)")
    render.console(stderr=True).print(f"Flower on {root} for broker {redact_url(settings.broker_url)}; {explorer}",
                                      highlight=False)
    sys.exit(app.start(argv) or 0)


def flower_argv(port: int, address: str, basic_auth: tuple[str, ...], url_prefix: str | None) -> list[str]:
    """``celery flower`` arguments; a malformed --basic-auth is refused here, not by a Flower traceback."""
    for entry in basic_auth:
        user, sep, password = entry.partition(":")
        if not sep or not user or not password:
            raise click.BadParameter(f"expected USER:PASSWORD, got {entry.split(':')[0]!r}…",
                                     param_hint="--basic-auth")
        if "," in entry:  # Flower splits its list of users on commas
            raise click.BadParameter(f"the entry for user {user!r} contains a ',', which Flower cannot take; "
                                     "choose a password without one", param_hint="--basic-auth")
    argv = ["--quiet", "flower", f"--port={port}", f"--address={address}", f"--tasks_columns={TASKS_COLUMNS}"]
    if basic_auth:
        argv.append(f"--basic_auth={','.join(basic_auth)}")
    if url_prefix:
        argv.append(f"--url_prefix={url_prefix.strip('/')}")
    return argv


