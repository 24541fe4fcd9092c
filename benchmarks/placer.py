"""Placer cost: µs per claim + give-back as the installation grows.

    .venv/bin/python benchmarks/placer.py [--repeat 3] [--calls 2000] [--sizes 1,100,1000]

Measures in-memory books (the embedded default) and Redis books (a real
redis-server started on a free 127.0.0.1 port) with 1, 100 and 1,000 machines
attached, and the in-memory placer with 10,000 calls already waiting. Prints
the median of the repeats.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402
from fluksio.placement.memory import MemoryBooks  # noqa: E402
from fluksio.placement.placer import Placer, Request  # noqa: E402
from fluksio.schemas import Inventory, Resources  # noqa: E402

REQUEST = Resources(cpus=1)
#: The issue's bound for in-memory books with 1,000 machines, in µs per claim + give-back.
TARGET_US = 200.0


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


def measure(sizes: list[int], calls: int, repeat: int, waiting: int = 10_000) -> list[Figure]:
    figures = []
    for size in sizes:
        placer = Placer(MemoryBooks())
        for inventory in machines(size):
            placer.attach(inventory)
        samples = [claim_give_us(placer, calls) for _ in range(repeat)]
        figures.append(Figure("placer (memory books)", f"claim + give-back, {size:,} machine(s)", "µs",
                              harness.median(samples), samples=samples,
                              target=TARGET_US if size == 1000 else None))
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-") as workdir:
        processes = harness.Processes(Path(workdir))
        try:
            server = harness.RedisServer(Path(workdir), processes).start()
            import redis

            from fluksio.placement.redis import RedisBooks

            for size in sizes:
                client = redis.Redis.from_url(server.url())
                client.flushall()
                books = RedisBooks(client, heartbeat_ttl_s=600)
                placer = Placer(books)
                for inventory in machines(size):
                    books.attach(inventory)
                redis_calls = max(20, calls // max(1, size // 10))
                samples = [claim_give_us(placer, redis_calls) for _ in range(repeat)]
                figures.append(Figure("placer (Redis books)", f"claim + give-back, {size:,} machine(s)", "µs",
                                      harness.median(samples), samples=samples,
                                      note=f"{redis_calls} claims per sample"))
                client.close()
        finally:
            processes.stop_all()
    samples = [with_waiting(waiting, calls) for _ in range(repeat)]
    figures.append(Figure("placer (memory books)", f"claim + give-back, 1 machine, {waiting:,} calls waiting",
                          "µs", harness.median(samples), samples=samples))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--sizes", default="1,100,1000")
    parser.add_argument("--waiting", type=int, default=10_000, help="calls already waiting (default 10,000)")
    harness.add_common_arguments(parser)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.calls, args.repeat, args.waiting = 200, 1, 1000
    sizes = [int(s) for s in args.sizes.split(",")]
    harness.emit_figures(measure(sizes, args.calls, args.repeat, args.waiting), args.json)


if __name__ == "__main__":
    main()
