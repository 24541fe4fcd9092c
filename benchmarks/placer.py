"""Placer cost: µs per claim + give-back as the installation grows.

    .venv/bin/python benchmarks/placer.py [--repeat 3] [--calls 2000]

Measures in-memory books (the embedded default) and Redis books (a real
redis-server started on a free port) with 1, 100 and 1,000 machines attached,
and the in-memory placer with 10,000 calls already waiting. Prints the median
of the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fluksio.placement.memory import MemoryBooks  # noqa: E402
from fluksio.placement.placer import Placer, Request  # noqa: E402
from fluksio.schemas import Inventory, Resources  # noqa: E402
from tests.integration.servers import RedisServer  # noqa: E402

REQUEST = Resources(cpus=1)


def machines(count: int) -> list[Inventory]:
    return [Inventory(name=f"m{i:04d}", cpus=8, gpus=(0, 1), ram_mb=64_000, labels=("gpu",) if i % 2 else ())
            for i in range(count)]


def claim_give_us(placer: Placer, calls: int, device: str | None = None) -> float:
    started = time.perf_counter()
    for i in range(calls):
        grant = placer.try_claim(Request(f"c{i}", REQUEST, device))
        placer.release(grant)  # type: ignore[arg-type]
    return (time.perf_counter() - started) / calls * 1e6


def with_waiting(count: int, calls: int) -> float:
    placer = Placer(MemoryBooks())
    placer.attach(Inventory(name="small", cpus=2, ram_mb=1000))
    placer.try_claim(Request("held", Resources(cpus=1)))  # one cpu stays busy throughout
    for i in range(count):  # each of these waits: it needs both cpus
        placer.try_claim(Request(f"w{i}", Resources(cpus=2)))
    assert len(placer.books.waiting()) == count
    return claim_give_us(placer, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--sizes", default="1,100,1000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for size in sizes:
        placer = Placer(MemoryBooks())
        for inventory in machines(size):
            placer.attach(inventory)
        rows.append(("memory", size, statistics.median(claim_give_us(placer, args.calls) for _ in range(args.repeat))))
    with tempfile.TemporaryDirectory() as workdir:
        server = RedisServer(Path(workdir)).start()
        try:
            import redis

            from fluksio.placement.redis import RedisBooks

            for size in sizes:
                client = redis.Redis.from_url(server.url)
                client.flushall()
                books = RedisBooks(client, heartbeat_ttl_s=600)
                placer = Placer(books)
                for inventory in machines(size):
                    books.attach(inventory)
                calls = max(20, args.calls // max(1, size // 10))
                rows.append(("redis", size, statistics.median(claim_give_us(placer, calls)
                                                              for _ in range(args.repeat))))
        finally:
            server.stop()
    waiting = statistics.median(with_waiting(10_000, args.calls) for _ in range(args.repeat))
    print(f"{'books':<8}{'machines':>10}{'µs per claim+give':>20}")
    for books_name, size, micros in rows:
        print(f"{books_name:<8}{size:>10}{micros:>20.1f}")
    print(f"{'memory':<8}{'1 (+10,000 waiting)':>10}{waiting:>12.1f}")


if __name__ == "__main__":
    main()
