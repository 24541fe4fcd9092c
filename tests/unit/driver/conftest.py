"""What the driver's tests share: an embedded runtime on a SQLite file, with the settings a test needs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fluksio import Settings
from fluksio.runtime import Runtime


@pytest.fixture
def make_runtime(tmp_path) -> Iterator[Callable[..., Runtime]]:
    """``make_runtime(cpus=2, …)``: a runtime whose machine and timings are the test's; closed afterwards."""
    made: list[Runtime] = []

    def make(**settings: Any) -> Runtime:
        made.append(Runtime.embedded(Settings(broker_url="memory://",
                                              database_url=f"sqlite:///{tmp_path / 'runs.db'}",
                                              artifacts_dir=tmp_path / "artifacts", **settings)))
        return made[-1]

    yield make
    for runtime in made:
        runtime.close()
