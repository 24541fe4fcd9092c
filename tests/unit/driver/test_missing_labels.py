"""Which required labels no live machine carries: looked up only for flows that require one."""

from __future__ import annotations

from types import SimpleNamespace

from fluksio.driver.waiting import missing_labels
from fluksio.flows.flow import Flow


class Machines:
    def __init__(self, *labelled: tuple[str, tuple[str, ...]]) -> None:
        self.reads = 0
        self._machines = [SimpleNamespace(name=name, labels=labels) for name, labels in labelled]

    def machines(self) -> list[SimpleNamespace]:
        self.reads += 1
        return self._machines


def runtime(placer: Machines) -> SimpleNamespace:
    return SimpleNamespace(placer=placer)


def test_a_flow_that_requires_no_label_does_not_read_the_machines() -> None:
    flow = Flow("plain", inputs={"x": int})

    @flow.node(provides="y")
    def step(x): ...

    @flow.node(provides="z", device="gpu", device_policy="prefer")
    def fit(y): ...

    placer = Machines(("box", ()))
    assert missing_labels(runtime(placer), flow) == []
    assert placer.reads == 0


def test_a_required_label_is_missing_until_a_machine_carries_it_or_is_named_so() -> None:
    flow = Flow("labelled", inputs={"x": int})

    @flow.node(provides="y", device="gpu")
    def train(x): ...

    @flow.node(provides="z", device="box2")
    def report(y): ...

    assert missing_labels(runtime(Machines(("box", ("cpu",)))), flow) == ["box2", "gpu"]
    assert missing_labels(runtime(Machines(("box", ("gpu",)), ("box2", ()))), flow) == []
