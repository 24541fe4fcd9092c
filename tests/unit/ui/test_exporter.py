"""The installation in Prometheus, scraped from an embedded installation as Prometheus would read it (the text
parsed by prometheus-client's own parser): machines, runs by status, call durations by flow and node, calls
running and waiting and why, pools; a source that fails or hangs answers ``fluksio_up 0`` in time, never an
error; and the explorer serves it all at ``/metrics``, behind its password."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("prometheus_client", reason="pip install 'fluksio[metrics]'")
pytest.importorskip("tornado", reason="pip install 'fluksio[ui]'")

from prometheus_client import generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from fluksio import Client, Flow, Resources, RunStatus, Settings, connect  # noqa: E402
from fluksio.errors import BrokerUnavailable, StoreUnavailable  # noqa: E402
from fluksio.ui.app import serve  # noqa: E402
from fluksio.ui.context import Explorer  # noqa: E402
from fluksio.ui.exporter import InstallationCollector, registry_of  # noqa: E402
from fluksio.ui.scrape import ScrapeEndpoint  # noqa: E402

#: Longest a held node waits for its gate, in seconds: a test that fails never leaves a call behind for long.
HELD_S = 60.0
#: Samples as ``{(name, ((label, value), …)): value}``.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(registry: Any) -> Samples:
    return parse(generate_latest(registry).decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """``check()``'s first truthy answer, asked every 20 ms until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while not (answer := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.02)
    return answer


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    with connect(Settings(database_url=f"sqlite:///{tmp_path / 'runs.db'}", artifacts_dir=tmp_path / "artifacts",
                          cpus=2, ram_mb=2048, machine_name="laptop", labels=["fast"],
                          pools={"licenses": 1})) as embedded:
        yield embedded


def sweep_flow() -> Flow:
    flow = Flow("sweep", inputs={"n": int}, outputs=["total"])

    @flow.node(provides="shards")
    def split(n: int) -> list[int]:
        return list(range(n))

    @flow.node(provides="counts", map={"shard": "shards"})
    def count(shard: int) -> int:
        return shard * 2

    @flow.node(provides="total")
    def add(counts: list[int]) -> int:
        return sum(counts)

    return flow


class Gated:
    """A flow whose node ``hold`` (one per element of ``items``, holding ``pool``'s slot if given) waits for the
    test to open its gate."""

    def __init__(self, name: str, pool: str | None = None, cpus: int = 1) -> None:
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)
        self.flow = Flow(name, inputs={"items": list[int]}, outputs=["held"])

        @self.flow.node(provides="held", map={"item": "items"}, pool=pool, resources=Resources(cpus=cpus),
                        cache=False)
        def hold(item: int) -> int:
            self.started.release()
            return item if self.gate.wait(HELD_S) else -1


def test_a_scrape_after_a_run_has_its_machine_its_run_and_its_calls_durations(client: Client) -> None:
    registry = registry_of(client)
    scrape(registry)  # the first scrape places the durations' cursor (calls from now on are counted)
    record = client.submit(sweep_flow(), {"n": 3}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    samples = scrape(registry)
    assert value(samples, "fluksio_up") == 1
    assert value(samples, "fluksio_machine_cpus_total", machine="laptop") == 2
    assert value(samples, "fluksio_machine_cpus_free", machine="laptop") == 2
    assert value(samples, "fluksio_machine_ram_mb_total", machine="laptop") == 2048
    assert value(samples, "fluksio_machine_gpus_total", machine="laptop") == 0
    assert value(samples, "fluksio_calls_running", machine="laptop") == 0
    assert value(samples, "fluksio_runs", status="ok") == 1 and value(samples, "fluksio_runs", status="error") == 0
    assert value(samples, "fluksio_call_duration_seconds_count", flow="sweep", node="count") == 3  # its elements
    assert value(samples, "fluksio_call_duration_seconds_count", flow="sweep", node="split") == 1
    assert value(samples, "fluksio_call_duration_seconds_bucket", flow="sweep", node="count", le="+Inf") == 3
    assert value(samples, "fluksio_oldest_waiting_call_age_seconds") == 0
    assert value(samples, "fluksio_pool_slots_total", pool="licenses") == 1
    assert not [key for key in samples if any(record.id in v for _, v in key[1])]  # no run id as a label
    again = scrape(registry)
    assert value(again, "fluksio_call_duration_seconds_count", flow="sweep", node="count") == 3  # counted once


def test_calls_waiting_are_counted_by_label_and_reason_while_others_run(client: Client) -> None:
    registry = registry_of(client)
    elements = Gated("elements")
    licensed = Gated("licensed", pool="licenses")
    handles = []
    try:
        handles.append(client.submit(licensed.flow, {"items": [0]}))
        assert licensed.started.acquire(timeout=HELD_S)  # it holds the pool's one slot (and a cpu)
        handles.append(client.submit(licensed.flow, {"items": [1]}))
        handles.append(client.submit(elements.flow, {"items": [0, 1, 2, 3]}))
        assert elements.started.acquire(timeout=HELD_S)  # one element holds the other cpu; three wait

        def settled() -> Samples | None:
            samples = scrape(registry)
            waiting = {labels: v for (name, labels), v in samples.items() if name == "fluksio_calls_waiting" and v}
            return samples if sum(waiting.values()) == 4 else None

        samples = wait_for(settled, "four calls listed as waiting")
        assert value(samples, "fluksio_calls_waiting", label="default", reason="resources") == 3
        assert value(samples, "fluksio_calls_waiting", label="default", reason="pool") == 1
        assert value(samples, "fluksio_calls_waiting", label="fast", reason="resources") == 0  # its label, written
        assert value(samples, "fluksio_calls_running", machine="laptop") == 2
        assert value(samples, "fluksio_machine_cpus_free", machine="laptop") == 0
        assert value(samples, "fluksio_pool_slots_used", pool="licenses") == 1
        assert value(samples, "fluksio_runs", status="running") == 3
        assert value(samples, "fluksio_oldest_waiting_call_age_seconds") >= 0
    finally:
        elements.gate.set()
        licensed.gate.set()
    for handle in handles:
        assert handle.wait(timeout=60).status is RunStatus.OK
    assert value(scrape(registry), "fluksio_calls_waiting", label="default", reason="resources") == 0


# -- sources that fail -----------------------------------------------------------------------------------


class Store:
    """The run store's counts, as a test makes them: answering, failing, or hanging until let go."""

    def __init__(self) -> None:
        self.error: Exception | None = None
        self.hold = threading.Event()
        self.hold.set()

    def _answer(self, result: Any) -> Any:
        self.hold.wait(HELD_S)
        if self.error is not None:
            raise self.error
        return result

    def runs_by_status(self) -> dict[str, int]:
        return self._answer({"ok": 4})

    def newest_call(self) -> int:
        return self._answer(0)

    def calls_after(self, row: int, limit: int) -> list[Any]:
        return self._answer([])

    def calls_among(self, rows: Any) -> list[Any]:
        return self._answer([])


def fake_client(store: Store, placement: Callable[[], dict[str, Any]]) -> Any:
    return SimpleNamespace(placement=placement, tallies=store)


def empty_placement() -> dict[str, Any]:
    return {"machines": [{"name": "m", "labels": [], "total": {"cpus": 4, "gpus": 0, "ram_mb": 10},
                          "free": {"cpus": 4, "gpus": 0, "ram_mb": 10}, "calls": 0}],
            "waiting": [], "pools": []}


def names(samples: Samples) -> set[str]:
    return {name for name, _labels in samples}


def test_a_store_or_broker_that_fails_is_fluksio_up_0_and_its_metrics_left_out() -> None:
    store = Store()
    store.error = StoreUnavailable("the run store at sqlite:///x was unreachable for 30 s")
    collector = InstallationCollector(fake_client(store, empty_placement), timeout_s=HELD_S)
    samples = parse(generate_latest(SimpleNamespace(collect=collector.collect)).decode())  # type: ignore[arg-type]
    assert value(samples, "fluksio_up") == 0
    assert value(samples, "fluksio_machine_cpus_total", machine="m") == 4  # what could be read is there
    assert not any(name == "fluksio_runs" for name in names(samples))

    def broker_down() -> dict[str, Any]:
        raise BrokerUnavailable("broker redis://127.0.0.1:1/0 unreachable")

    store.error = None
    collector = InstallationCollector(fake_client(store, broker_down), timeout_s=HELD_S)
    samples = parse(generate_latest(SimpleNamespace(collect=collector.collect)).decode())  # type: ignore[arg-type]
    assert value(samples, "fluksio_up") == 0 and value(samples, "fluksio_runs", status="ok") == 4
    assert not any(name.startswith("fluksio_machine_") for name in names(samples))


def test_a_store_that_hangs_is_fluksio_up_0_in_time_and_counts_again_once_it_answers() -> None:
    store = Store()
    collector = InstallationCollector(fake_client(store, empty_placement), timeout_s=1.0)
    registry = SimpleNamespace(collect=collector.collect)
    wait_for(lambda: value(scrape(registry), "fluksio_up") == 1, "a first scrape that reads everything")
    store.hold.clear()  # every read of the store now hangs (an outage its client waits through)
    try:
        assert value(scrape(registry), "fluksio_up") == 0
        assert value(scrape(registry), "fluksio_up") == 0
        threads = [t.name for t in threading.enumerate() if t.name.startswith("fluksio-metrics: the run store")]
        assert len(threads) == 2  # one read per source in flight (counts, node rows), not one per scrape
    finally:
        store.hold.set()
    wait_for(lambda: value(scrape(registry), "fluksio_up") == 1, "the store to answer again")


# -- the explorer's /metrics ----------------------------------------------------------------------------


@contextmanager
def explorer_at(explorer: Explorer) -> Iterator[str]:
    """The explorer served on a free 127.0.0.1 port of this process; its URL."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    bound: list[int] = []
    task: list[asyncio.Task[None]] = []

    def run() -> None:
        asyncio.set_event_loop(loop)

        def listening(port: int) -> None:
            bound.append(port)
            ready.set()

        task.append(loop.create_task(serve(explorer, 0, "127.0.0.1", listening)))
        try:
            loop.run_until_complete(task[0])
        except asyncio.CancelledError:
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30), "the explorer did not listen"
    try:
        yield f"http://127.0.0.1:{bound[0]}"
    finally:
        loop.call_soon_threadsafe(task[0].cancel)
        thread.join(30)
        explorer.close()


def get(url: str, **headers: str) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_the_explorer_serves_metrics_in_the_format_asked_behind_its_password(client: Client) -> None:
    with explorer_at(Explorer(client, credentials=("ops:secret",))) as url:
        status, _, body = get(f"{url}/metrics")
        assert status == 401 and "user and password" in body
        auth = "Basic " + base64.b64encode(b"ops:secret").decode()
        status, content_type, body = get(f"{url}/metrics", Authorization=auth)
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        assert value(parse(body), "fluksio_machine_cpus_total", machine="laptop") == 2
        status, content_type, body = get(f"{url}/metrics", Authorization=auth,
                                         Accept="application/openmetrics-text; version=1.0.0")
        assert status == 200 and content_type.startswith("application/openmetrics-text")
        assert body.endswith("# EOF\n") and "fluksio_up 1.0" in body


def test_without_prometheus_client_metrics_is_a_503_that_says_what_to_install(client: Client) -> None:
    explorer = Explorer(client)

    async def answer() -> tuple[int, str]:
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError
        from tornado.httpserver import HTTPServer
        from tornado.netutil import bind_sockets
        from tornado.web import Application

        sockets = bind_sockets(0, "127.0.0.1")
        server = HTTPServer(Application([(r"/metrics", ScrapeEndpoint, {"explorer": explorer, "registry": None})]))
        server.add_sockets(sockets)
        try:
            await AsyncHTTPClient().fetch(f"http://127.0.0.1:{sockets[0].getsockname()[1]}/metrics")
        except HTTPClientError as exc:
            assert exc.response is not None
            return exc.code, exc.response.body.decode()
        finally:
            server.stop()
        raise AssertionError("/metrics answered 200 without a registry")

    try:
        status, body = asyncio.run(answer())
    finally:
        explorer.close()
    assert status == 503 and "pip install 'fluksio[metrics]'" in body and "\n" not in body.strip()
