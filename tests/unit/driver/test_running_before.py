"""What a resumed drive adopts of its earlier drive's calls: those a worker started and that still hold their
grant; a grant no worker started (its driver died between claiming and sending) is voided and its unit sent
again (issue #38)."""

from __future__ import annotations

from collections.abc import Callable

from fluksio.driver.inherited import running_before
from fluksio.messages import call_id
from fluksio.runtime import Runtime
from fluksio.schemas import Resources

RUN = "01M8Y3EK103VR0TCCDXHPNP5E0"


def test_a_started_call_is_adopted_and_a_never_started_one_is_voided(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime(cpus=4)
    books = runtime.placer.books
    started = books.take_best(None, Resources(cpus=1), call_id(RUN, 0, "fit[0]", 1))
    unsent = books.take_best(None, Resources(cpus=1), call_id(RUN, 0, "fit[1]", 2))
    other_run = books.take_best(None, Resources(cpus=1), call_id("01M8Y3EK103VR0TCCDXHPNP5E1", 0, "fit[0]", 1))
    assert started is not None and unsent is not None and other_run is not None
    assert books.start(started, "a worker's delivery")

    adopted = running_before(runtime, RUN, 1)

    assert adopted == {"fit[0]": (1, started)}
    held = {grant.id for grants in books.held().values() for grant in grants}
    assert held == {started.id, other_run.id}  # the unsent call's resources are free again
    assert not books.start(unsent, "its message, delivered late")  # and its message can no longer run it


def test_calls_of_the_drive_itself_are_not_its_earlier_ones(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime(cpus=2)
    books = runtime.placer.books
    current = books.take_best(None, Resources(cpus=1), call_id(RUN, 1, "fit[0]", 1))
    assert current is not None
    assert running_before(runtime, RUN, 1) == {}
    assert {grant.id for grants in books.held().values() for grant in grants} == {current.id}
