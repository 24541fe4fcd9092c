"""One machine's books: exact accounting of cpus, GPU ids and RAM."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluksio.placement.books import MachineBooks
from fluksio.schemas import Inventory, Resources


def books(cpus=8, gpus=(0, 1, 2, 3), ram_mb=16_000) -> MachineBooks:
    return MachineBooks(Inventory(name="box", cpus=cpus, gpus=tuple(gpus), ram_mb=ram_mb, labels=("gpu",)))


def test_a_fresh_machine_is_all_free():
    b = books()
    assert b.free == Resources(cpus=8, gpus=4, ram_mb=16_000)
    assert b.free_gpus == [0, 1, 2, 3]
    assert b.load == 0
    assert b.grants == {}


def test_take_holds_exactly_what_was_asked():
    b = books()
    grant = b.take(Resources(cpus=3, gpus=2, ram_mb=1000), "call-1")
    assert grant is not None
    assert grant.id == "call-1" and grant.machine == "box"
    assert grant.cpus == 3 and grant.ram_mb == 1000 and len(grant.gpus) == 2
    assert grant.clamped_from is None
    assert b.free == Resources(cpus=5, gpus=2, ram_mb=15_000)
    assert set(b.free_gpus).isdisjoint(grant.gpus)
    assert b.load == pytest.approx(3 / 8)


def test_take_records_what_a_clamped_grant_was_cut_from():
    b = books()
    original = Resources(cpus=64)
    grant = b.take(Resources(cpus=8), "call-1", clamped_from=original)
    assert grant.clamped_from == original


@pytest.mark.parametrize(
    "request_",
    [Resources(cpus=9), Resources(gpus=5), Resources(ram_mb=16_001)],
    ids=["cpus", "gpus", "ram"],
)
def test_take_refuses_more_than_is_free(request_):
    b = books()
    assert b.take(request_, "call-1") is None
    assert b.free == Resources(cpus=8, gpus=4, ram_mb=16_000)
    assert b.grants == {}


def test_take_never_over_commits_cpus():
    b = books(cpus=4)
    grants = [b.take(Resources(cpus=1), f"c{i}") for i in range(6)]
    assert [g is not None for g in grants] == [True] * 4 + [False] * 2
    assert b.free_cpus == 0
    assert b.load == 1


def test_take_never_over_commits_ram():
    b = books(cpus=16, ram_mb=1000)
    assert b.take(Resources(ram_mb=600), "a") is not None
    assert b.take(Resources(ram_mb=600), "b") is None
    assert b.take(Resources(ram_mb=400), "c") is not None
    assert b.free_ram_mb == 0


def test_gpu_ids_are_disjoint_between_grants():
    b = books(cpus=8, gpus=(3, 5, 7, 9))
    first = b.take(Resources(gpus=2), "a")
    second = b.take(Resources(gpus=2), "b")
    assert set(first.gpus) | set(second.gpus) == {3, 5, 7, 9}
    assert set(first.gpus).isdisjoint(second.gpus)
    assert b.take(Resources(gpus=1), "c") is None


def test_given_back_gpus_are_granted_again():
    b = books(gpus=(0, 1))
    first = b.take(Resources(gpus=1), "a")
    b.take(Resources(gpus=1), "b")
    assert b.give("a") is True
    again = b.take(Resources(gpus=1), "c")
    assert again.gpus == first.gpus


def test_give_returns_everything_held():
    b = books()
    b.take(Resources(cpus=3, gpus=2, ram_mb=1000), "a")
    assert b.give("a") is True
    assert b.free == Resources(cpus=8, gpus=4, ram_mb=16_000)
    assert b.free_gpus == [0, 1, 2, 3]
    assert b.grants == {}


def test_give_is_idempotent():
    b = books()
    b.take(Resources(cpus=2, gpus=1, ram_mb=100), "a")
    b.take(Resources(cpus=1), "b")
    assert b.give("a") is True
    assert b.give("a") is False
    assert b.give("never-granted") is False
    assert b.free == Resources(cpus=7, gpus=4, ram_mb=16_000)


def test_taking_the_same_grant_id_twice_charges_once():
    b = books()
    first = b.take(Resources(cpus=2), "a")
    second = b.take(Resources(cpus=2), "a")
    assert second == first
    assert b.free_cpus == 6


def test_free_of_a_fully_busy_machine_reports_zero_cpus():
    b = books(cpus=2)
    b.take(Resources(cpus=2), "a")
    assert b.free_cpus == 0
    assert b.free.cpus == 0


def test_could_ever_fit_looks_at_the_empty_machine():
    b = books(cpus=4, gpus=(0,), ram_mb=1000)
    b.take(Resources(cpus=4, gpus=1, ram_mb=1000), "busy")
    assert b.fits_now(Resources(cpus=1)) is False
    assert b.could_ever_fit(Resources(cpus=4, gpus=1, ram_mb=1000)) is True
    assert b.could_ever_fit(Resources(cpus=5)) is False
    assert b.could_ever_fit(Resources(gpus=2)) is False
    assert b.could_ever_fit(Resources(ram_mb=1001)) is False


operations = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(0, 9), st.integers(1, 5), st.integers(0, 3), st.integers(0, 3000)),
        st.tuples(st.just("give"), st.integers(0, 9)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_accounting_stays_exact_under_any_sequence_of_takes_and_gives(ops):
    inventory = Inventory(name="box", cpus=8, gpus=(0, 1, 2), ram_mb=8000)
    b = MachineBooks(inventory)
    for op in ops:
        if op[0] == "take":
            _, call, cpus, gpus, ram = op
            b.take(Resources(cpus=cpus, gpus=gpus, ram_mb=ram), f"c{call}")
        else:
            b.give(f"c{op[1]}")
        held = list(b.grants.values())
        held_gpus = [g for grant in held for g in grant.gpus]
        assert b.free_cpus + sum(g.cpus for g in held) == inventory.cpus
        assert b.free_ram_mb + sum(g.ram_mb for g in held) == inventory.ram_mb
        assert b.free_cpus >= 0 and b.free_ram_mb >= 0
        assert len(held_gpus) == len(set(held_gpus))  # no GPU in two grants
        assert sorted(held_gpus + b.free_gpus) == [0, 1, 2]  # no GPU lost or invented


def test_rank_follows_the_load_as_grants_come_and_go():
    b = books(cpus=8)
    assert b.rank == (True, 0.0, "box")  # labelled 'gpu'
    b.take(Resources(cpus=2), "a")
    assert b.rank == (True, 0.25, "box")
    b.give("a")
    assert b.rank == (True, 0.0, "box")
