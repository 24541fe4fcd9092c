"""Artifacts in an S3 bucket, against a real S3-compatible server (moto's) started here on 127.0.0.1.

The embedded client, real `fluksio worker` processes on a real Redis, and the CLI all use the bucket; each
test works under a prefix of its own. What a test does behind fluksio's back (corrupting or deleting an
object) it does with boto3, as an operator would.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fluksio import Artifact, Client, Flow, RunRejected, RunStatus, Settings, connect
from fluksio.artifacts import ObjectArtifactStore, open_store
from fluksio.errors import ArtifactError, ConfigError
from fluksio.store.run_rows import get_run
from tests.integration.support import object_store_flows
from tests.integration.support.cluster import Cluster
from tests.integration.support.servers import MotoServer, RedisServer, free_port, running_moto
from tests.integration.support.stall_proxy import StallingProxy

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "fluksio"


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with running_moto(tmp_path_factory.mktemp("moto"), BUCKET) as server:
        yield server


@pytest.fixture(autouse=True)
def aws_environment(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process (and the processes it starts) use the moto server, whatever this machine has set."""
    moto.use_in(monkeypatch)


@pytest.fixture
def url() -> str:
    """A prefix of this test's own in the bucket."""
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:12]}"


def settings_for(tmp_path: Path, url: str, cache: str = "cache", **overrides: Any) -> Settings:
    values: dict[str, Any] = {"database_url": f"sqlite:///{tmp_path / 'fluksio.db'}", "artifacts_dir": url,
                              "artifacts_cache": tmp_path / cache, "cpus": 2, "machine_name": "local",
                              "lease_interval_s": 0.5, **overrides}
    return Settings(**values)


@pytest.fixture
def client(tmp_path: Path, url: str) -> Iterator[Client]:
    with connect(settings_for(tmp_path, url)) as connected:
        yield connected


def key_of(url: str, digest: str) -> str:
    hexpart = digest.split(":")[1]
    return f"{url.split('/', 3)[3]}/sha256/{hexpart[:2]}/{hexpart}"


def keys_under(moto: MotoServer, url: str) -> list[str]:
    listed = moto.client().list_objects_v2(Bucket=BUCKET, Prefix=url.split("/", 3)[3] + "/")  # type: ignore[attr-defined]
    return sorted(item["Key"] for item in listed.get("Contents", []))


def digest_in(value: dict[str, Any]) -> str:
    return str(value["$artifact"]["digest"])


def fluksio_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command's result, its standard error joined into one line (rich wraps it at the terminal's width)."""
    done = subprocess.run([sys.executable, "-m", "fluksio.cli.main", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    done.stderr = " ".join(done.stderr.split())
    return done


def cli_env(tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    return {**env, "FLUKSIO_ARTIFACTS_DIR": url, "FLUKSIO_DATABASE_URL": f"sqlite:///{tmp_path / 'fluksio.db'}",
            "FLUKSIO_CONFIG": str(tmp_path / "none.toml"), **extra}


def blob_flow(name: str, payload: bytes, copies: int = 1, retries: int = 0) -> Flow:
    flow = Flow(name)
    for index in range(copies):
        def make() -> Artifact:
            return Artifact.from_bytes(payload, name="blob.bin")

        flow.node(make, name=f"make{index}", provides=f"blob{index}", retries=retries)
    return flow


def reading_flow(name: str) -> Flow:
    flow = Flow(name, inputs={"blob": Artifact})

    @flow.node(provides="size")
    def measure(blob: Artifact) -> int:
        return len(blob.read_bytes())

    return flow


# -- the demo, the CLI ------------------------------------------------------------------------------------


def test_the_demo_flows_model_round_trips_through_the_bucket(client: Client, moto: MotoServer, url: str,
                                                              tmp_path: Path) -> None:
    flow = client.flow(f"{ROOT / 'examples' / 'demo.py'}:flow")
    record = client.submit(flow, {"epochs": 30, "n_samples": 100}, seed=3).wait(timeout=120)
    assert record.status is RunStatus.OK, record.status_reason
    digest = digest_in(record.result["model"])
    assert key_of(url, digest) in keys_under(moto, url)
    assert record.result["rmse"] > 0  # evaluate read the model back through the store
    # Another host: nothing in its cache, the bytes come from the bucket.
    elsewhere = open_store(settings_for(tmp_path, url, cache="elsewhere"), check=True)
    assert json.loads(elsewhere.get(digest)) == record.result["weights"]
    # `fluksio artifact get` streams the same bytes to a file.
    out = tmp_path / "model.json"
    got = fluksio_cli("artifact", "get", digest, "-o", str(out), env=cli_env(tmp_path, url), cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert json.loads(out.read_bytes()) == record.result["weights"]


def test_fluksio_artifact_get_refuses_a_corrupt_object_and_leaves_no_file(client: Client, moto: MotoServer,
                                                                          url: str, tmp_path: Path) -> None:
    stored = client._runtime.artifacts.put(Artifact.from_bytes(b"true bytes " * 1000))
    moto.client().put_object(Bucket=BUCKET, Key=key_of(url, stored.digest), Body=b"other bytes")  # type: ignore[attr-defined]
    out = tmp_path / "copy.bin"
    got = fluksio_cli("artifact", "get", stored.digest, "-o", str(out), env=cli_env(tmp_path, url), cwd=tmp_path)
    assert got.returncode == 2
    assert f"artifact {stored.digest} read from {url}" in got.stderr and "does not match its digest" in got.stderr
    assert "Traceback" not in got.stderr
    assert not out.exists() and list(tmp_path.glob(".copy.bin*")) == []


# -- content addressing and checks -------------------------------------------------------------------------


def test_the_same_bytes_made_twice_are_stored_once(client: Client, moto: MotoServer, url: str) -> None:
    payload = uuid.uuid4().bytes * 1000
    flow = blob_flow("twice", payload, copies=2)
    first = client.submit(flow).wait(timeout=60)
    assert first.status is RunStatus.OK, first.status_reason
    digest = digest_in(first.result["blob0"])
    assert digest_in(first.result["blob1"]) == digest
    # Besides the run's code package and its graph (stored once at submit: "Code that travels with the run").
    shipped = get_run(client._runtime.db, first.id)
    code = {key_of(url, shipped.code_digest), key_of(url, shipped.graph_digest)}
    assert sorted(set(keys_under(moto, url)) - code) == [key_of(url, digest)]
    # Made again by a later run: the upload is skipped (a stand-in put behind fluksio's back stays).
    moto.client().put_object(Bucket=BUCKET, Key=key_of(url, digest), Body=b"stand-in")  # type: ignore[attr-defined]
    again = client.submit(flow, no_cache=True).wait(timeout=60)
    assert again.status is RunStatus.OK, again.status_reason
    body = moto.client().get_object(Bucket=BUCKET, Key=key_of(url, digest))["Body"].read()  # type: ignore[attr-defined]
    assert body == b"stand-in"
    assert sorted(set(keys_under(moto, url)) - code) == [key_of(url, digest)]


def test_a_corrupted_object_is_refused_on_read(client: Client, moto: MotoServer, url: str, tmp_path: Path) -> None:
    made = client.submit(blob_flow("corruptible", uuid.uuid4().bytes * 500)).wait(timeout=60)
    assert made.status is RunStatus.OK, made.status_reason
    digest = digest_in(made.result["blob0"])
    moto.client().put_object(Bucket=BUCKET, Key=key_of(url, digest), Body=b"flipped bits")  # type: ignore[attr-defined]
    reader = open_store(settings_for(tmp_path, url, cache="fresh"))
    for read in (reader.get, reader.path):
        with pytest.raises(ArtifactError, match=f"artifact {digest} read from {url} at {moto.endpoint} does not "
                                                "match its digest"):
            read(digest)
    with reader.open(digest) as stream, pytest.raises(ArtifactError, match="does not match its digest"):
        stream.read()
    # Inside a run, on a host whose cache holds no good copy: the node that reads it fails, saying why.
    with connect(settings_for(tmp_path, url, cache="fresh")) as other:
        record = other.submit(reading_flow("reads"), {"blob": f"@run:{made.id}.blob0"}).wait(timeout=60)
    assert record.status is RunStatus.ERROR
    assert f"artifact {digest} read from {url} at {moto.endpoint} does not match its digest" in record.nodes[0].error


def test_the_run_cache_misses_once_the_object_is_deleted(client: Client, moto: MotoServer, url: str) -> None:
    flow = blob_flow("deletable", uuid.uuid4().bytes * 500)
    first = client.submit(flow).wait(timeout=60)
    assert first.status is RunStatus.OK, first.status_reason
    cached = client.submit(flow).wait(timeout=60)
    assert [n.status.value for n in cached.nodes] == ["cached"]
    digest = digest_in(first.result["blob0"])
    moto.client().delete_object(Bucket=BUCKET, Key=key_of(url, digest))  # type: ignore[attr-defined]
    # References to the gone bytes are refused at submit, before anything is journaled.
    for reference in (digest, f"@run:{first.id}.blob0"):
        with pytest.raises(RunRejected, match=f"the bytes of artifact {digest} are gone from the store"):
            client.submit(reading_flow("refers"), {"blob": reference})
    rerun = client.submit(flow).wait(timeout=60)
    assert [n.status.value for n in rerun.nodes] == ["ok"]  # a miss: the node ran and stored the bytes again
    assert key_of(url, digest) in keys_under(moto, url)


# -- memory ------------------------------------------------------------------------------------------------


def test_a_2_gb_file_is_stored_and_read_back_with_flat_memory(moto: MotoServer, url: str, tmp_path: Path) -> None:
    """Artifact.from_path, put (a multipart upload), then a fresh host's path(): each grows the process by at
    most 64 MB (measured by the kernel's high-water mark, in a process of its own)."""
    size = 2 << 30
    env = cli_env(tmp_path, url, FLUKSIO_ARTIFACTS_CACHE=str(tmp_path / "cache"))
    probe = subprocess.run([sys.executable, str(Path(__file__).parent / "support" / "artifact_rss.py"),
                            str(tmp_path / "checkpoint.bin"), str(size)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=900)
    assert probe.returncode == 0, probe.stderr[-3000:]
    measured = json.loads(probe.stdout)
    try:
        assert measured["size"] == size
        head = moto.client().head_object(Bucket=BUCKET, Key=key_of(url, measured["digest"]))  # type: ignore[attr-defined]
        assert head["ContentLength"] == size
        for step in ("digest", "upload", "download"):
            assert measured[f"{step}_growth"] <= 64 << 20, measured
    finally:
        moto.client().delete_object(Bucket=BUCKET, Key=key_of(url, measured["digest"]))  # type: ignore[attr-defined]


# -- failing early, failing one node ----------------------------------------------------------------------


def test_a_worker_whose_bucket_is_missing_refuses_to_start(tmp_path: Path) -> None:
    missing = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/runs"
    # No broker is reached: the store is checked before anything else is set up.
    env = cli_env(tmp_path, missing, FLUKSIO_BROKER_URL=f"redis://127.0.0.1:{free_port()}/0")
    worker = fluksio_cli("worker", "--name", "w", "--cpus", "1", "--gpus", "none", env=env, cwd=tmp_path)
    assert worker.returncode == 2
    assert f"FLUKSIO_ARTIFACTS_DIR={missing}" in worker.stderr and "does not exist" in worker.stderr
    assert "Traceback" not in worker.stderr
    run = fluksio_cli("run", f"{ROOT / 'examples' / 'demo.py'}:flow", env=cli_env(tmp_path, missing), cwd=tmp_path)
    assert run.returncode == 2 and f"FLUKSIO_ARTIFACTS_DIR={missing}" in run.stderr
    with pytest.raises(ConfigError, match="bucket 'no-such-bucket-.*' does not exist"):
        connect(settings_for(tmp_path, missing))


def test_refused_credentials_and_an_unreachable_endpoint_are_said_at_connect(tmp_path: Path, url: str) -> None:
    refusing = MotoServer(tmp_path / "refusing", auth=True).start()
    try:
        with pytest.raises(ConfigError, match="the object store refused these credentials for bucket 'fluksio'"):
            connect(settings_for(tmp_path, url, artifacts_endpoint_url=refusing.endpoint))
    finally:
        refusing.stop()
    nowhere = f"http://operator:hunter2@127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match="cannot reach the object store") as caught:
        connect(settings_for(tmp_path, url, artifacts_endpoint_url=nowhere, artifacts_timeout_s=2))
    assert f"FLUKSIO_ARTIFACTS_DIR={url} at http://operator:***@127.0.0.1:" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_store_that_stalls_mid_run_fails_the_node_after_its_retries_not_the_driver(
        moto: MotoServer, url: str, tmp_path: Path) -> None:
    proxy = StallingProxy(moto.port).start()
    try:
        settings = settings_for(tmp_path, url, artifacts_endpoint_url=proxy.url, artifacts_timeout_s=1)
        with connect(settings) as client:
            flow = blob_flow("stalled", uuid.uuid4().bytes * 100, retries=1)
            proxy.stall()
            record = client.submit(flow, no_cache=True).wait(timeout=120)
            assert record.status is RunStatus.ERROR
            assert [(n.attempt, n.status.value) for n in record.nodes] == [(1, "error"), (2, "error")]
            for node in record.nodes:
                assert "node 'make0' could not store its outputs: artifact store" in node.error
                assert url in node.error
            proxy.resume()  # the same driver runs the next run
            record = client.submit(flow, no_cache=True).wait(timeout=60)
            assert record.status is RunStatus.OK, record.status_reason
    finally:
        proxy.stop()


# -- two hosts that share no folder ------------------------------------------------------------------------


def test_two_workers_without_a_shared_folder_exchange_a_50_mb_artifact_through_the_bucket(
        moto: MotoServer, url: str, tmp_path: Path) -> None:
    redis_server = RedisServer(tmp_path / "redis").start()
    cluster = Cluster(tmp_path, redis_server)
    cluster.env.update({**moto.env, "FLUKSIO_ARTIFACTS_DIR": url,
                        "FLUKSIO_FLOWS": str(Path(object_store_flows.__file__).resolve())})
    hosts = {"maker": tmp_path / "host-a", "reader": tmp_path / "host-b"}
    try:
        for name, folder in hosts.items():
            folder.mkdir()
            flags = ["--labels", name, "--cpus", "1", "--gpus", "none"] + (["--drivers"] if name == "maker" else [])
            cluster.start_worker(name, *flags, cwd=folder)
        cluster.wait_attached(*hosts)
        with cluster.client() as client:
            record = client.submit(object_store_flows.exchange, {"size_mb": 50}).wait(timeout=180)
    finally:
        cluster.stop_all()
        redis_server.stop()
    assert record.status is RunStatus.OK, (record.status_reason, [n.error for n in record.nodes])
    assert {n.node: n.machine for n in record.nodes} == {"make": "maker", "read": "reader"}
    digest = digest_in(record.result["blob"])
    read = record.result["read"]
    assert (read["digest"], read["size"]) == (digest, 50 << 20)
    assert Path(record.result["made_in"]) == hosts["maker"] and Path(read["cwd"]) == hosts["reader"]
    # The reader's copy came from the bucket into its own cache; neither host has an artifacts folder.
    assert Path(read["path"]).is_relative_to(hosts["reader"] / ".fluksio" / "artifacts-cache")
    for folder in hosts.values():
        assert not (folder / ".fluksio" / "artifacts").exists()
    assert not list((hosts["maker"] / ".fluksio").glob("artifacts-cache/sha256/*/*"))
    head = moto.client().head_object(Bucket=BUCKET, Key=key_of(url, digest))  # type: ignore[attr-defined]
    assert head["ContentLength"] == 50 << 20
    assert hashlib.sha256(Path(read["path"]).read_bytes()).hexdigest() == digest.split(":")[1]


def test_the_object_store_is_the_store_every_runtime_uses(client: Client) -> None:
    assert isinstance(client._runtime.artifacts, ObjectArtifactStore)
