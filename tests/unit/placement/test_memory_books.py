"""Memory books: picking and taking in one step among the machines a placer names."""

from __future__ import annotations

import threading

import pytest

from fluksio.placement.backend import MachinesChanged, preference
from fluksio.placement.memory import MemoryBooks
from fluksio.schemas import Grant, Inventory, Resources


def machine(name, cpus=4, gpus=(), ram_mb=8000, labels=()) -> Inventory:
    return Inventory(name=name, cpus=cpus, gpus=tuple(gpus), ram_mb=ram_mb, labels=tuple(labels))


def books_with(*inventories: Inventory) -> MemoryBooks:
    books = MemoryBooks()
    for inventory in inventories:
        books.attach(inventory)
    return books


def free_cpus(books: MemoryBooks) -> dict[str, int]:
    return {view.inventory.name: view.free.cpus for view in books.machines()}


def test_preference_puts_unlabelled_first_then_least_loaded_then_name():
    ranked = sorted([
        preference(True, 8, 8, "a-gpu"),       # idle, but labelled
        preference(False, 4, 1, "b"),          # 3/4 loaded
        preference(False, 4, 3, "c"),          # 1/4 loaded
        preference(False, 8, 6, "a"),          # 2/8 loaded: ties with c, earlier name
    ])
    assert [key[2] for key in ranked] == ["a", "c", "b", "a-gpu"]


def test_take_best_prefers_unlabelled_then_least_loaded_then_name():
    books = books_with(machine("a-gpu", cpus=32, labels=("gpu",)), machine("m2", cpus=4), machine("m1", cpus=4))
    one = Resources(cpus=1)
    order = [books.take_best(None, one, f"c{i}").machine for i in range(9)]
    # m1 and m2 tie when equally loaded (name decides); the idle GPU box only once both are full.
    assert order == ["m1", "m2", "m1", "m2", "m1", "m2", "m1", "m2", "a-gpu"]


def test_take_best_uses_only_the_named_candidates():
    books = books_with(machine("a", cpus=4), machine("b", cpus=4), machine("c", cpus=4))
    grant = books.take_best(["b", "c"], Resources(cpus=4), "c1")
    assert grant.machine == "b"
    assert books.take_best(["b"], Resources(cpus=1), "c2") is None  # b is full; a and c were not named
    assert free_cpus(books) == {"a": 4, "b": 0, "c": 4}


def test_take_best_skips_machines_without_the_gpus_or_ram_free():
    books = books_with(machine("a", cpus=8, ram_mb=1000), machine("b", cpus=8, gpus=(0,), ram_mb=1000),
                       machine("c", cpus=8, gpus=(3, 4), ram_mb=9000))
    assert books.take_best(None, Resources(gpus=1), "g1").machine == "b"  # a has no GPU
    assert books.take_best(None, Resources(gpus=1), "g2").machine == "c"  # b's GPU is held
    assert books.take_best(None, Resources(ram_mb=5000), "r1").machine == "c"
    assert books.take_best(None, Resources(gpus=2), "g3") is None


def test_take_best_answers_none_and_holds_nothing_when_nothing_fits():
    books = books_with(machine("a", cpus=2), machine("b", cpus=2))
    assert books.take_best(None, Resources(cpus=3), "c1") is None
    assert free_cpus(books) == {"a": 2, "b": 2}


def test_a_retried_take_returns_the_grant_it_has_and_charges_once():
    books = books_with(machine("a", cpus=2), machine("b", cpus=2))
    first = books.take_best(None, Resources(cpus=2), "c1")
    again = books.take_best(None, Resources(cpus=2), "c1")
    also = books.take_best(["b"], Resources(cpus=2), "c1")  # even when that machine was not named
    assert first == again == also
    assert sum(free_cpus(books).values()) == 2


def test_a_grant_id_is_taken_afresh_once_given_back():
    books = books_with(machine("a", cpus=2))
    first = books.take_best(None, Resources(cpus=2), "c1")
    assert books.give(first) is True
    assert books.take_best(None, Resources(cpus=1), "c1").cpus == 1


def test_take_best_raises_when_a_candidate_left_and_takes_nothing():
    books = books_with(machine("a", cpus=2), machine("b", cpus=2))
    books.detach("a")
    with pytest.raises(MachinesChanged):
        books.take_best(["a", "b"], Resources(cpus=1), "c1")
    assert free_cpus(books) == {"b": 2}


def test_inventories_follow_attach_and_detach_sorted_by_name():
    books = books_with(machine("b"), machine("a"))
    before = books.inventories()
    assert [i.name for i in before] == ["a", "b"]
    assert books.inventories(cached=True) is before  # unchanged machines: the very same sequence
    books.attach(machine("c"))
    assert [i.name for i in books.inventories()] == ["a", "b", "c"]
    books.detach("a")
    assert [i.name for i in books.inventories()] == ["b", "c"]


def test_a_machine_attaching_again_starts_afresh_and_its_old_grants_are_void():
    books = books_with(machine("a", cpus=2))
    old = books.take_best(None, Resources(cpus=2), "c1")
    books.attach(machine("a", cpus=2))
    assert free_cpus(books) == {"a": 2}
    assert books.give(old) is False
    fresh = books.take_best(None, Resources(cpus=1), "c1")  # the void grant is not handed out again
    assert fresh.cpus == 1 and free_cpus(books) == {"a": 1}


def test_concurrent_takes_never_over_commit():
    books = books_with(machine("a", cpus=3), machine("b", cpus=2))
    grants: list[Grant | None] = []
    start = threading.Barrier(16)

    def take(i: int) -> None:
        start.wait()
        grants.append(books.take_best(None, Resources(cpus=1), f"c{i}"))

    threads = [threading.Thread(target=take, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = [g for g in grants if g is not None]
    assert len(held) == 5
    assert sorted(g.machine for g in held) == ["a", "a", "a", "b", "b"]
    assert free_cpus(books) == {"a": 0, "b": 0}
