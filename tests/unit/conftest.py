"""What the unit tests share: a run store on a SQLite file of the test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fluksio.store.db import Database


@pytest.fixture
def db(tmp_path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'runs.db'}")
    database.upgrade()
    yield database
    database.dispose()
