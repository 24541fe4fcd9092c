"""Codec values in an object store (a real S3-compatible server, moto): stored through the store's put, read
back through its local cache, the same types and contents as with a folder."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from fluksio import Client, RunStatus, Settings, connect
from tests.integration.support import codec_flows as flows
from tests.integration.support.servers import MotoServer, running_moto

pytestmark = pytest.mark.integration

BUCKET = "codecs"


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with running_moto(tmp_path_factory.mktemp("moto"), BUCKET) as server:
        yield server


@pytest.fixture
def client(moto: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    moto.use_in(monkeypatch)
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'fluksio.db'}", cpus=2, machine_name="local",
                        artifacts_dir=f"s3://{BUCKET}/t-{uuid.uuid4().hex[:12]}", artifacts_cache=tmp_path / "cache")
    with connect(settings) as connected:
        yield connected


def test_typed_values_cross_a_node_boundary_through_an_object_store(client: Client, moto: MotoServer) -> None:
    record = client.submit(flows.typed, {"n": 5}).wait(timeout=120)
    assert record.status is RunStatus.OK, [n.error for n in record.nodes]
    report = record.result["report"]
    assert report["equal"] == dict.fromkeys(report["types"], True)
    digest = record.result["frame"]["$artifact"]["digest"]
    prefix = str(client.settings.artifacts_dir).split("/", 3)[3]
    hexpart = digest.split(":")[1]
    listed = moto.client().list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/blake3/")  # type: ignore[attr-defined]
    assert f"{prefix}/blake3/{hexpart[:2]}/{hexpart}" in {item["Key"] for item in listed["Contents"]}
    pd.testing.assert_frame_equal(client.output(record.id, "frame"), flows.expected_values(5)["frame"])


def test_a_map_over_frames_in_an_object_store(client: Client) -> None:
    record = client.submit(flows.shards, {"count": 3}).wait(timeout=120)
    assert record.status is RunStatus.OK, record.status_reason
    assert [s["rows"] for s in record.result["sizes"]] == [1, 2, 3]
    assert record.result["joined"]["rows"] == 6
