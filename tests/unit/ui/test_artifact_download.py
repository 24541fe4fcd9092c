"""An artifact download opens the bytes it streams, so a local copy evicted between its fetch and its opening
is fetched again, never answered with a server error."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from fluksio.artifacts import digest_of
from fluksio.artifacts.store import FETCHES
from fluksio.errors import ArtifactError
from fluksio.store.db import Database
from fluksio.store.nodes import ArtifactRow, NodeRow, record_nodes
from fluksio.ui import queries
from tests.unit.store.test_listing import add_run

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


def download(db: Database, store: EvictedCopies):  # type: ignore[no-untyped-def]
    run = add_run(db)
    record_nodes(db, [NodeRow(run_id=run, node="fit", status="ok")],
                 [ArtifactRow(run_id=run, node="fit", message="model", digest=DIGEST, size=len(DATA),
                              media_type="application/octet-stream", name="model.bin")])
    client = SimpleNamespace(runtime=SimpleNamespace(db=db, artifacts=store))
    return queries.artifact_file(client, DIGEST)  # type: ignore[arg-type]


def test_a_copy_evicted_before_it_was_opened_is_fetched_again(db: Database, tmp_path: Path) -> None:
    store = EvictedCopies(tmp_path, evicted=1)
    row, handle = download(db, store)
    with handle:
        assert handle.read() == DATA and row.name == "model.bin"
    assert store.fetches == 2


def test_a_copy_evicted_at_every_fetch_is_an_artifact_error_naming_why(db: Database, tmp_path: Path) -> None:
    store = EvictedCopies(tmp_path, evicted=FETCHES)
    with pytest.raises(ArtifactError, match=f"{DIGEST}: this host's copy was removed each time as soon as it"):
        download(db, store)
    assert store.fetches == FETCHES
