"""An artifact download opens the bytes it streams, so a local copy evicted between its fetch and its opening
is fetched again, never answered with a server error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio import Client, Settings, connect
from fluksio.artifacts import digest_of
from fluksio.artifacts.store import FETCHES
from fluksio.errors import ArtifactError
from fluksio.store.nodes import ArtifactRow, NodeRow, record_nodes
from fluksio.ui import queries
from tests.unit.store.runs import add_run

DATA = b"the model's bytes"
DIGEST = digest_of(DATA)


class EvictedCopies:
    """An object store's ``path``: each fetch names a local copy, the first ``evicted`` of them removed by
    another process's cache eviction before the caller opens them."""

    def __init__(self, folder: Path, evicted: int) -> None:
        self.folder, self.evicted, self.fetches = folder, evicted, 0

    def path(self, digest: str) -> Path:
        self.fetches += 1
        copy = self.folder / f"copy-{self.fetches}"
        if self.fetches > self.evicted:
            copy.write_bytes(DATA)
        return copy


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    with connect(Settings(database_url=f"sqlite:///{tmp_path / 'runs.db'}", artifacts_dir=tmp_path / "artifacts",
                          cpus=1)) as client:
        yield client


def download(client: Client, store: EvictedCopies):  # type: ignore[no-untyped-def]
    db = client._runtime.db
    run = add_run(db)
    record_nodes(db, [NodeRow(run_id=run, node="fit", status="ok")],
                 [ArtifactRow(run_id=run, node="fit", message="model", digest=DIGEST, size=len(DATA),
                              media_type="application/octet-stream", name="model.bin")])
    client._runtime.artifacts = store  # type: ignore[assignment]  # an object store another process evicts from
    return queries.artifact_file(client, DIGEST)


def test_a_copy_evicted_before_it_was_opened_is_fetched_again(client: Client, tmp_path: Path) -> None:
    store = EvictedCopies(tmp_path, evicted=1)
    row, handle = download(client, store)
    with handle:
        assert handle.read() == DATA and row.name == "model.bin"
    assert store.fetches == 2


def test_a_copy_evicted_at_every_fetch_is_an_artifact_error_naming_why(client: Client, tmp_path: Path) -> None:
    store = EvictedCopies(tmp_path, evicted=FETCHES)
    with pytest.raises(ArtifactError, match=f"{DIGEST}: this host's copy was removed each time as soon as it"):
        download(client, store)
    assert store.fetches == FETCHES
