"""Why a call waits, as one word: each sentence the placer makes maps onto its kind (the sentences themselves
come from a real placer in turn_scenarios.py, on memory and on Redis books); anything else is ``other``."""

from __future__ import annotations

import pytest

from fluksio.placement.reasons import WaitKind, calls_listed, wait_kind
from fluksio.placement.turns import behind_reason, pool_reason


@pytest.mark.parametrize(("reason", "kind"), [
    ("waiting for a worker to attach", WaitKind.NO_MACHINE),
    ("waiting for a worker labelled 'gpu'", WaitKind.NO_MACHINE),
    ("waiting for a worker labelled 'gpu' with 2 gpu(s) and 1 cpu(s) free", WaitKind.RESOURCES),
    ("waiting for a worker with 1 cpu(s) free", WaitKind.RESOURCES),
    (pool_reason("licenses", 4, 4), WaitKind.POOL),
    (behind_reason("fit", "01J", 3), WaitKind.TURN),
    ("12 of 40 elements waiting for a worker with 1 cpu(s) free", WaitKind.RESOURCES),
    ("3 of 3 elements " + pool_reason("db", 1, 1), WaitKind.POOL),
    ("waiting while the attached machines change", WaitKind.OTHER),
    ("", WaitKind.OTHER),
])
def test_each_reason_has_one_kind(reason: str, kind: WaitKind) -> None:
    assert wait_kind(reason) is kind


def test_a_mapped_node_s_entry_stands_for_its_waiting_elements() -> None:
    assert calls_listed("12 of 40 elements waiting for a worker with 1 cpu(s) free") == 12
    assert calls_listed("waiting for a worker with 1 cpu(s) free") == 1
    assert calls_listed("waiting for pool 'x' (12 of 40 elements in use)") == 1  # only a leading count counts
