"""Chain and fan-out on Redis: fluksio against the raw-Celery equivalent, same broker, same workers.

    .venv/bin/python benchmarks/celery_redis.py [--chain 200] [--fanout 1000] [--map 1000,10000] [--repeat 3]

Starts a redis-server on a free 127.0.0.1 port, one ``fluksio worker --drivers`` with ``--cpus``
node slots (Redis database 0) and one plain ``celery worker`` with the same prefork concurrency
(database 1), then alternates:

* chain: ``--chain`` dependent no-op nodes vs ``chain(noop.s() × N)`` — milliseconds per hop;
* fan-out: ``--fanout`` independent no-op nodes vs ``group(noop.s() × N)`` — node calls per second;
* map: one mapped node over ``--map`` elements (each one no-op call) vs ``group(noop.s() × N)`` — calls
  per second.

fluksio's time runs from ``client.submit`` to the run's ``finished_at`` (written by the driver), so
the client's backing-off wait loop is not counted; Celery's from ``apply_async`` to ``get()``
returning (on the last task's result alone, so that Celery does not poll the chain's unfinished
parents). Each figure is the median of ``--repeat`` runs, after one warm-up run of each.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.bench_flows import chain_name, fanout_name  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

#: The issues' targets, as ratios fluksio / raw Celery.
CHAIN_TARGET, FANOUT_TARGET, MAP_TARGET = 1.5, 0.7, 0.7


def fluksio_run_s(client, flow: str, timeout: float, params: dict | None = None) -> float:  # type: ignore[no-untyped-def]
    """Seconds from submit to the run's end, as the driver recorded it."""
    started = time.time()
    record = client.submit(flow, params or {}, no_cache=True).wait(timeout=timeout)
    if record.status.value != "ok":
        raise RuntimeError(f"{flow} ended {record.status.value}: {record.status_reason}")
    return record.finished_at.timestamp() - started


def celery_chain_s(app, length: int, timeout: float) -> float:  # type: ignore[no-untyped-def]
    from celery import chain

    started = time.time()
    last = chain(app.signature("rawbench.noop") for _ in range(length)).apply_async()
    # Wait on the last result alone: ``last.get()`` would also look up every unfinished parent in
    # the result backend each time it wakes (hundreds of GETs per hop), slowing Celery down.
    app.AsyncResult(last.id).get(timeout=timeout)
    return time.time() - started


def celery_group_s(app, width: int, timeout: float) -> float:  # type: ignore[no-untyped-def]
    from celery import group

    started = time.time()
    result = group(app.signature("rawbench.noop") for _ in range(width)).apply_async()
    result.get(timeout=timeout)
    elapsed = time.time() - started
    result.forget()
    return elapsed


def redis_calls(client) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Commands the Redis server has executed so far, by command."""
    return {name.removeprefix("cmdstat_"): stats["calls"] for name, stats in client.info("commandstats").items()}


def commands_per_hop(client, run, length: int) -> tuple[float, str]:  # type: ignore[no-untyped-def]
    """Redis commands per hop over one chain (idle workers' polls included), and the busiest ones."""
    before = redis_calls(client)
    run()
    after = redis_calls(client)
    delta = {name: count - before.get(name, 0) for name, count in after.items() if count > before.get(name, 0)}
    busiest = sorted(delta.items(), key=lambda item: -item[1])[:6]
    return sum(delta.values()) / length, ", ".join(f"{name} {count / length:.1f}" for name, count in busiest)


#: What the counting pass sends last: the monitor stops when it sees it.
_STOP = "fluksio-bench-monitor-stop"


def sent_per_hop(client, run, length: int) -> float:  # type: ignore[no-untyped-def]
    """Commands the clients sent per hop over one chain, not counting those a script ran inside Redis (which
    ``commands_per_hop`` counts, as the server does): each is a command on the wire, a script one. Read from
    ``MONITOR``, which slows the server down: a pass of its own, never a timed one. The idle workers' polls
    are counted, as there."""
    sent: list[str] = []
    listening, stopped = threading.Event(), threading.Event()

    def listen() -> None:
        with client.monitor() as monitor:  # entered once Redis has said OK: it is listening
            listening.set()
            for command in monitor.listen():
                if _STOP in command["command"]:
                    stopped.set()
                    return
                if command.get("client_type") != "lua":
                    sent.append(command["command"])

    watcher = threading.Thread(target=listen, name="bench-monitor", daemon=True)
    watcher.start()
    if not listening.wait(10):
        raise RuntimeError("MONITOR did not start within 10 s")
    try:
        run()
    finally:
        client.echo(_STOP)  # also when the run failed: the monitor must not stay on for the timed passes
        watcher.join(30)
    if not stopped.is_set():
        raise RuntimeError("the MONITOR pass did not see its end within 30 s: its count would be partial")
    return len(sent) / length


def map_figures(client, app, widths: list[int], repeat: int, deadline: float, cpus: int,  # type: ignore[no-untyped-def]
                 timeout: float) -> list[Figure]:
    """A mapped node over each of ``widths`` elements against a Celery group of as many no-op tasks."""
    figures = []
    for width in widths:
        items = {"items": list(range(width))}
        harness.progress(f"map of {width}, {repeat} repeat(s)")
        samples = harness.interleaved({
            "fluksio map": lambda: fluksio_run_s(client, "bench_map", timeout * 4, items),  # noqa: B023
            "celery group": lambda: celery_group_s(app, width, timeout * 4),  # noqa: B023
        }, repeat, deadline)
        rate = {k: [width / s for s in v] for k, v in samples.items()}
        if rate["fluksio map"] and rate["celery group"]:
            figures.append(Figure(
                "map (Redis)", f"one node mapped over {width:,} no-op elements", "calls/s",
                harness.median(rate["fluksio map"]), harness.median(rate["celery group"]), "raw Celery group",
                higher_is_better=True, target=MAP_TARGET, samples=rate["fluksio map"],
                baseline_samples=rate["celery group"], note=f"{cpus} worker slots each"))
    return figures


def measure(length: int, width: int, repeat: int, cpus: int, budget_s: float,
            map_widths: list[int] | None = None) -> list[Figure]:
    from fluksio import connect

    deadline = time.monotonic() + budget_s
    sizes = f"chain={length};fanout={width}"
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-") as workdir, \
            harness.redis_installation(Path(workdir), cpus, sizes) as installation:
        app = installation["raw_app"]
        timeout = harness.RUN_TIMEOUT_S
        with connect(installation["fluksio"]) as client:
            harness.progress("warming up")
            fluksio_run_s(client, chain_name(length), timeout)
            celery_chain_s(app, length, timeout)
            fluksio_run_s(client, fanout_name(width), timeout)
            celery_group_s(app, width, timeout)
            import redis

            server = redis.Redis.from_url(installation["redis"].url())
            ours_per_hop, ours_busiest = commands_per_hop(
                server, lambda: fluksio_run_s(client, chain_name(length), timeout), length)
            theirs_per_hop, theirs_busiest = commands_per_hop(
                server, lambda: celery_chain_s(app, length, timeout), length)
            ours_sent = sent_per_hop(server, lambda: fluksio_run_s(client, chain_name(length), timeout), length)
            theirs_sent = sent_per_hop(server, lambda: celery_chain_s(app, length, timeout), length)
            server.close()
            harness.progress(f"chain of {length}, fan-out of {width}, {repeat} repeat(s)")
            samples = harness.interleaved({
                "fluksio chain": lambda: fluksio_run_s(client, chain_name(length), timeout),
                "celery chain": lambda: celery_chain_s(app, length, timeout),
                "fluksio fanout": lambda: fluksio_run_s(client, fanout_name(width), timeout),
                "celery fanout": lambda: celery_group_s(app, width, timeout),
            }, repeat, deadline)
            mapped = map_figures(client, app, map_widths or [], repeat, deadline, cpus, timeout)
            # Celery's results unsubscribe when collected: let that happen while Redis still answers
            # (collected after it stopped, each one retries its reconnection for minutes).
            gc.collect()
    hop_ms = {k: [s / length * 1000 for s in v] for k, v in samples.items() if "chain" in k}
    rate = {k: [width / s for s in v] for k, v in samples.items() if "fanout" in k}
    return [
        Figure("chain (Redis)", f"{length} dependent no-op nodes", "ms per hop",
               harness.median(hop_ms["fluksio chain"]), harness.median(hop_ms["celery chain"]), "raw Celery chain",
               target=CHAIN_TARGET, samples=hop_ms["fluksio chain"], baseline_samples=hop_ms["celery chain"],
               note=f"{cpus} worker slots each"),
        Figure("fan-out (Redis)", f"{width} independent no-op nodes", "calls/s",
               harness.median(rate["fluksio fanout"]), harness.median(rate["celery fanout"]), "raw Celery group",
               higher_is_better=True, target=FANOUT_TARGET, samples=rate["fluksio fanout"],
               baseline_samples=rate["celery fanout"], note=f"{cpus} worker slots each"),
        Figure("chain (Redis)", "Redis commands per hop", "commands", ours_per_hop, theirs_per_hop,
               "raw Celery chain", note=f"fluksio: {ours_busiest}; Celery: {theirs_busiest} (one chain each)"),
        Figure("chain (Redis)", "Redis commands sent per hop (a script one)", "commands", ours_sent, theirs_sent,
               "raw Celery chain", note="the commands above less those fluksio's scripts run inside Redis "
               "(from MONITOR, one chain each)"),
        *mapped,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chain", type=int, default=200, help="nodes in the chain (default 200)")
    parser.add_argument("--fanout", type=int, default=1000, help="nodes in the fan-out (default 1000)")
    parser.add_argument("--map", default="1000,10000", help="elements of the mapped node, comma-separated "
                                                              "(default 1000,10000; '' for none)")
    parser.add_argument("--cpus", type=int, default=2, help="node slots of each worker (default 2)")
    harness.add_common_arguments(parser)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.chain, args.fanout, args.repeat, args.map = 20, 50, 1, "50"
    widths = [int(w) for w in args.map.split(",") if w.strip()]
    harness.emit_figures(measure(args.chain, args.fanout, args.repeat, args.cpus, args.budget_s, widths), args.json)


if __name__ == "__main__":
    main()
