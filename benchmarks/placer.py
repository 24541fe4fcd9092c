"""Placer cost: µs per claim + give-back as the installation grows.

    .venv/bin/python benchmarks/placer.py [--repeat 3] [--calls 2000] [--sizes 1,100,1000]

Measures in-memory books (the embedded default) and Redis books (a real
redis-server started on a free 127.0.0.1 port) with 1, 100 and 1,000 machines
attached, and the in-memory placer with 10,000 calls already waiting. Then fair
sharing: with 10,000 calls of mixed priorities waiting for GPUs (16 machines,
every GPU held), on both books, the cost of a CPU call that backfills (claim +
give-back: it plays the calls ahead of it through) and of a GPU call that must
wait in its turn (a refused claim, which keeps it listed). Prints the median of
the repeats.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402
from fluksio.placement.backend import Books  # noqa: E402
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


#: The shapes of the GPU calls that wait in the fair-sharing figures: (cpus, gpus, ram_mb).
WAITING_SHAPES = [(1, 1, 0), (2, 1, 4000), (4, 2, 16_000), (1, 1, 8000)]


def fair_share(books: Books, waiting: int, calls: int) -> tuple[float, float]:
    """µs per backfilling claim + give-back, and µs per refused GPU claim, with ``waiting`` calls of mixed
    priorities (0..9) and four shapes listed as waiting for a GPU on 16 machines whose GPUs are all held."""
    placer = Placer(books, stale_after_s=600)
    for i in range(16):
        placer.attach(Inventory(name=f"g{i:02d}", cpus=32, gpus=(0, 1), ram_mb=256_000, labels=("gpu",)))
    for i in range(16):
        placer.try_claim(Request(f"hog{i}", Resources(cpus=1, gpus=2), f"g{i:02d}"))
    draw = random.Random(7)
    for i in range(waiting):
        cpus, gpus, ram_mb = WAITING_SHAPES[i % len(WAITING_SHAPES)]
        placer.try_claim(Request(f"w{i}", Resources(cpus=cpus, gpus=gpus, ram_mb=ram_mb), "gpu",
                                 priority=draw.randrange(10)))
    assert len(placer.books.waiting()) == waiting
    started = time.perf_counter()
    for i in range(calls):  # priority 0: behind nearly every waiting call, none of which can use a cpu alone
        grant = placer.try_claim(Request(f"b{i}", REQUEST, priority=0))
        placer.release(grant)  # type: ignore[arg-type]
    backfill = (time.perf_counter() - started) / calls * 1e6
    started = time.perf_counter()
    for _ in range(calls):
        placer.try_claim(Request("gpu-job", Resources(cpus=1, gpus=1), "gpu", priority=5))
    refused = (time.perf_counter() - started) / calls * 1e6
    return backfill, refused


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
            shared = []
            for _ in range(repeat):
                client = redis.Redis.from_url(server.url())
                client.flushall()
                shared.append(fair_share(RedisBooks(client, heartbeat_ttl_s=600), waiting, max(20, calls // 10)))
                client.close()
            figures += fair_share_figures("Redis books", waiting, shared)
        finally:
            processes.stop_all()
    samples = [with_waiting(waiting, calls) for _ in range(repeat)]
    figures.append(Figure("placer (memory books)", f"claim + give-back, 1 machine, {waiting:,} calls waiting",
                          "µs", harness.median(samples), samples=samples))
    figures += fair_share_figures("memory books", waiting, [fair_share(MemoryBooks(), waiting, calls)
                                                            for _ in range(repeat)])
    return figures


def fair_share_figures(books: str, waiting: int, samples: list[tuple[float, float]]) -> list[Figure]:
    backfill, refused = [s[0] for s in samples], [s[1] for s in samples]
    what = f"{waiting:,} calls of mixed priorities waiting"
    return [Figure(f"placer ({books})", f"backfilling claim + give-back, {what}", "µs", harness.median(backfill),
                   samples=backfill),
            Figure(f"placer ({books})", f"claim that waits its turn, {what}", "µs", harness.median(refused),
                   samples=refused)]


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
