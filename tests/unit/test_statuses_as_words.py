"""Statuses print as the words they are stored as, wherever a message puts one (``resumed from abandoned``,
never ``resumed from RunStatus.ABANDONED``)."""

from __future__ import annotations

import pytest

from fluksio.provisioners.request import RequestState
from fluksio.schemas import CatchUp, DevicePolicy, NodeStatus, RunStatus


@pytest.mark.parametrize("status", [*RunStatus, *NodeStatus, *RequestState, *DevicePolicy, *CatchUp])
def test_a_status_in_a_message_is_its_word(status: RunStatus) -> None:
    assert f"resumed from {status}" == f"resumed from {status.value}"
    assert str(status) == status.value and "%s" % status == status.value  # noqa: UP031 - the old way says it too
    assert status == status.value  # still stored and compared as the word
