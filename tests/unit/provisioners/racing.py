"""Several drivers (provisioners sharing one request store) asking for the same profile at once."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from fluksio.provisioners.fake import FakeProvisioner
from fluksio.provisioners.request import MachineRequest


def ask_at_once(drivers: Sequence[FakeProvisioner], profile: str) -> list[MachineRequest]:
    """Every driver asks for ``profile`` at the same moment; their answers, once submissions are done."""
    barrier = threading.Barrier(len(drivers))
    answers: list[MachineRequest] = []

    def ask(driver: FakeProvisioner) -> None:
        barrier.wait()
        answers.append(driver.request(profile, f"{driver.owner} waits"))

    threads = [threading.Thread(target=ask, args=(d,)) for d in drivers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert all(d.join_submissions(10) for d in drivers)
    return answers
