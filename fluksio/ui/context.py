"""``Explorer``: what every request handler of the run explorer shares — the client, where it is mounted, who
may use it — and the checks that decide whether it may listen on an address at all."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fluksio.client import Client
from fluksio.errors import ConfigError
from fluksio.settings import is_loopback

T = TypeVar("T")

#: Threads that run the explorer's store and broker reads, so that a slow query never stalls the event loop.
READ_THREADS = 4


@dataclass
class Explorer:
    """The run explorer of one installation, as a set of pages mounted at ``base``."""

    client: Client
    #: Path every page and API URL starts with: ``""`` for ``fluksio ui``, ``/fluksio`` inside Flower.
    base: str = ""
    #: Flower's URL: each node call links to its task page there (``None``: no links).
    flower: str | None = None
    #: ``user:password`` entries accepted by HTTP basic auth (none: no password asked).
    credentials: tuple[str, ...] = ()
    #: A further check of each request (Flower's login, when mounted in a Flower that has one).
    authorize: Callable[[Any], bool] | None = None
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(READ_THREADS, thread_name_prefix="fluksio-ui"))

    def __post_init__(self) -> None:
        self.base = "/" + self.base.strip("/") if self.base.strip("/") else ""

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on one of the explorer's threads (store and Redis reads block)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def parse_credentials(entries: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``user:password`` entries, checked: both parts present."""
    for entry in entries:
        user, sep, password = entry.partition(":")
        if not sep or not user or not password:
            raise ConfigError(f"basic auth must be USER:PASSWORD, got {user!r}…; give both, joined by ':'")
    return tuple(entries)


def check_bind(address: str, credentials: tuple[str, ...]) -> None:
    """Refuse to serve runs (and their Cancel buttons) to other hosts without a password."""
    if not credentials and not is_loopback(address):
        raise ConfigError(
            f"the explorer would listen on {address or 'every interface'}, where other hosts reach it, without a "
            "password: give --basic-auth USER:PASSWORD (or set FLUKSIO_UI_BASIC_AUTH), or listen on 127.0.0.1 "
            "and reach it through an SSH tunnel")
