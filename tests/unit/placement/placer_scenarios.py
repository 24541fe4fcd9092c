"""Placer behaviours any books must show, each written against ``Placer(…)`` as this module names it.

tests/unit/placement/test_placer.py runs every one on memory books; tests/integration/test_redis_books.py runs
them on Redis books, swapping this module's ``Placer`` for one built on them."""

from __future__ import annotations

import threading
from collections.abc import Callable

from fluksio.placement.placer import Placer, Request, Waiting
from fluksio.schemas import DevicePolicy, Grant, Resources
from tests.unit.placement.machines import Clock, machine

SCENARIOS: list[Callable[[], None]] = []


def scenario(behaviour: Callable[[], None]) -> Callable[[], None]:
    """Lists the behaviour in ``SCENARIOS``, in the order of this module."""
    SCENARIOS.append(behaviour)
    return behaviour


def req(call_id, cpus=1, gpus=0, ram_mb=0, device=None, policy=DevicePolicy.REQUIRE, run_id="run1", node=None):
    return Request(call_id, Resources(cpus=cpus, gpus=gpus, ram_mb=ram_mb), device=device, policy=policy,
                   run_id=run_id, node=node or call_id)


def seen(placer: Placer, name: str) -> dict:
    """One machine's entry in the placer's snapshot."""
    [entry] = [m for m in placer.snapshot()["machines"] if m["name"] == name]
    return entry


def placer_with(*inventories, shapes=(), clock: Clock | None = None) -> Placer:
    placer = Placer(provisioner_shapes=shapes, clock=clock or Clock())
    for inventory in inventories:
        placer.attach(inventory)
    return placer


# -- device labels ---------------------------------------------------------------------------------


@scenario
def require_waits_for_a_labelled_worker_when_none_is_attached():
    placer = placer_with(machine("laptop"))
    outcome = placer.try_claim(req("c1", device="gpu"))
    assert isinstance(outcome, Waiting)
    assert outcome.no_machine is True
    assert outcome.reason.startswith("waiting for a worker labelled 'gpu'")
    assert seen(placer, "laptop")["free"]["cpus"] == 4  # nothing was held on the laptop


@scenario
def require_is_granted_once_a_labelled_worker_attaches():
    placer = placer_with(machine("laptop"))
    assert isinstance(placer.try_claim(req("c1", device="gpu", gpus=1)), Waiting)
    placer.attach(machine("box", gpus=(0,), labels=("gpu",)))
    grant = placer.try_claim(req("c1", device="gpu", gpus=1))
    assert isinstance(grant, Grant)
    assert grant.machine == "box" and grant.gpus == (0,)


@scenario
def a_machine_name_is_one_of_its_labels():
    placer = placer_with(machine("laptop"), machine("box1"))
    grant = placer.try_claim(req("c1", device="box1"))
    assert isinstance(grant, Grant) and grant.machine == "box1"


@scenario
def require_never_falls_back_to_an_unlabelled_machine():
    placer = placer_with(machine("laptop", cpus=64), machine("box", cpus=2, labels=("gpu",)))
    placer.try_claim(req("busy", cpus=2, device="gpu"))
    outcome = placer.try_claim(req("c1", cpus=1, device="gpu"))
    assert isinstance(outcome, Waiting)
    assert outcome.no_machine is False


@scenario
def prefer_falls_back_when_no_machine_carries_the_label():
    placer = placer_with(machine("laptop"))
    grant = placer.try_claim(req("c1", device="gpu", policy=DevicePolicy.PREFER))
    assert isinstance(grant, Grant) and grant.machine == "laptop"


@scenario
def prefer_uses_the_labelled_machine_when_it_can_take_the_node():
    placer = placer_with(machine("laptop"), machine("box", labels=("gpu",)))
    grant = placer.try_claim(req("c1", device="gpu", policy=DevicePolicy.PREFER))
    assert isinstance(grant, Grant) and grant.machine == "box"


@scenario
def prefer_waits_for_a_busy_labelled_machine_rather_than_falling_back():
    placer = placer_with(machine("laptop", cpus=16), machine("box", cpus=3, labels=("gpu",)))
    assert isinstance(placer.try_claim(req("busy", cpus=2, device="gpu")), Grant)
    outcome = placer.try_claim(req("c1", cpus=2, device="gpu", policy=DevicePolicy.PREFER))
    assert isinstance(outcome, Waiting)
    assert "labelled 'gpu'" in outcome.reason
    assert seen(placer, "laptop")["free"]["cpus"] == 16  # the laptop was not used


@scenario
def prefer_falls_back_when_no_labelled_machine_could_ever_take_the_node():
    placer = placer_with(machine("laptop", cpus=16, ram_mb=64_000), machine("box", cpus=2, labels=("gpu",)))
    grant = placer.try_claim(req("c1", cpus=8, device="gpu", policy=DevicePolicy.PREFER))
    assert isinstance(grant, Grant)
    assert grant.machine == "laptop"
    assert grant.cpus == 8 and grant.clamped_from is None  # fell back, not clamped to the small box


# -- unlabelled work -------------------------------------------------------------------------------


@scenario
def unlabelled_work_goes_to_machines_without_labels_first():
    placer = placer_with(machine("a-gpu-box", cpus=32, labels=("gpu",)), machine("z-laptop", cpus=2))
    placer.try_claim(req("first", cpus=1))
    grant = placer.try_claim(req("second", cpus=1))
    assert isinstance(grant, Grant)
    assert grant.machine == "z-laptop"  # although the GPU box is idle and bigger


@scenario
def unlabelled_work_goes_to_the_least_loaded_machine():
    placer = placer_with(machine("a", cpus=4), machine("b", cpus=4))
    first = placer.try_claim(req("c1", cpus=2))
    second = placer.try_claim(req("c2", cpus=1))
    assert {first.machine, second.machine} == {"a", "b"}
    third = placer.try_claim(req("c3", cpus=1))
    assert third.machine == second.machine  # 1/4 loaded beats 2/4


@scenario
def unlabelled_work_uses_a_labelled_machine_when_the_others_are_full():
    placer = placer_with(machine("box", cpus=4, labels=("gpu",)), machine("laptop", cpus=1))
    assert placer.try_claim(req("c1")).machine == "laptop"
    assert placer.try_claim(req("c2")).machine == "box"


# -- busy machines and clamping --------------------------------------------------------------------


@scenario
def a_busy_machine_is_waited_for_with_a_reason_naming_the_resources():
    placer = placer_with(machine("laptop", cpus=2, ram_mb=4000))
    assert isinstance(placer.try_claim(req("c1", cpus=2)), Grant)
    outcome = placer.try_claim(req("c2", cpus=2, ram_mb=1000))
    assert outcome == Waiting("waiting for a worker with 2 cpu(s) and 1000 MB RAM free", no_machine=False,
                              wanted=Resources(cpus=2, ram_mb=1000))


@scenario
def a_busy_labelled_machine_reason_names_the_label_and_gpus():
    placer = placer_with(machine("box", cpus=4, gpus=(0,), labels=("gpu",)))
    placer.try_claim(req("c1", gpus=1, device="gpu"))
    outcome = placer.try_claim(req("c2", gpus=1, device="gpu"))
    assert isinstance(outcome, Waiting)
    assert outcome.reason == "waiting for a worker labelled 'gpu' with 1 gpu(s) and 1 cpu(s) free"


@scenario
def a_request_larger_than_every_machine_is_clamped_and_granted():
    placer = placer_with(machine("laptop", cpus=4, ram_mb=8000))
    grant = placer.try_claim(req("c1", cpus=64, ram_mb=1_000_000))
    assert isinstance(grant, Grant)
    assert (grant.cpus, grant.ram_mb) == (4, 8000)
    assert grant.clamped_from == Resources(cpus=64, ram_mb=1_000_000)


@scenario
def a_busy_machine_is_not_clamped_away():
    placer = placer_with(machine("small", cpus=2), machine("big", cpus=8))
    placer.try_claim(req("hog", cpus=8))  # lands on 'big' (the only one that fits)
    outcome = placer.try_claim(req("c1", cpus=8))
    assert isinstance(outcome, Waiting)
    assert "8 cpu(s)" in outcome.reason
    assert placer.try_claim(req("c2", cpus=2)).machine == "small"


@scenario
def clamping_for_a_label_uses_only_machines_carrying_it():
    placer = placer_with(machine("laptop", cpus=64), machine("box", cpus=8, gpus=(0, 1), labels=("gpu",)))
    grant = placer.try_claim(req("c1", cpus=32, gpus=1, device="gpu"))
    assert isinstance(grant, Grant)
    assert grant.machine == "box" and grant.cpus == 8 and len(grant.gpus) == 1


@scenario
def provisioner_shapes_count_so_a_request_they_fit_is_not_clamped():
    shapes = [(Resources(cpus=64, gpus=8, ram_mb=512_000), ("gpu",))]
    placer = placer_with(machine("box", cpus=8, gpus=(0,), labels=("gpu",)), shapes=shapes)
    outcome = placer.try_claim(req("c1", cpus=32, gpus=4, device="gpu"))
    assert isinstance(outcome, Waiting)
    assert "4 gpu(s) and 32 cpu(s)" in outcome.reason
    assert seen(placer, "box")["calls"] == 0


@scenario
def provisioner_shapes_for_another_label_do_not_count():
    shapes = [(Resources(cpus=64), ("bigmem",))]
    placer = placer_with(machine("box", cpus=8, labels=("gpu",)), shapes=shapes)
    grant = placer.try_claim(req("c1", cpus=32, device="gpu"))
    assert isinstance(grant, Grant) and grant.cpus == 8 and grant.clamped_from == Resources(cpus=32)


@scenario
def gpu_ids_are_never_shared_between_grants():
    placer = placer_with(machine("box", cpus=8, gpus=(0, 1, 2, 3), labels=("gpu",)))
    grants = [placer.try_claim(req(f"c{i}", gpus=1, device="gpu")) for i in range(4)]
    ids = [g.gpus[0] for g in grants]
    assert sorted(ids) == [0, 1, 2, 3]
    assert isinstance(placer.try_claim(req("c5", gpus=1, device="gpu")), Waiting)


@scenario
def claiming_the_same_call_twice_returns_the_same_grant():
    placer = placer_with(machine("laptop", cpus=2))
    first = placer.try_claim(req("c1"))
    again = placer.try_claim(req("c1"))
    assert again == first
    assert seen(placer, "laptop")["free"]["cpus"] == 1


# -- release, listeners, detach -------------------------------------------------------------------


@scenario
def release_frees_the_resources_for_the_next_call():
    placer = placer_with(machine("laptop", cpus=1))
    grant = placer.try_claim(req("c1"))
    assert isinstance(placer.try_claim(req("c2")), Waiting)
    assert placer.release(grant) is True
    assert isinstance(placer.try_claim(req("c2")), Grant)


@scenario
def removed_listeners_are_not_called():
    placer = placer_with(machine("laptop"))
    calls = []

    def listener():
        calls.append(1)

    placer.add_listener(listener)
    placer.remove_listener(listener)
    placer.remove_listener(listener)  # removing twice is harmless
    placer.release(placer.try_claim(req("c1")))
    placer.attach(machine("other"))
    assert calls == []


@scenario
def detach_of_an_unknown_machine_returns_nothing():
    assert Placer().detach("ghost") == []


# -- visibility ------------------------------------------------------------------------------------


@scenario
def snapshot_lists_each_machine_s_grants_by_call_id_until_given_back():
    placer = placer_with(machine("box", cpus=4, gpus=(2, 5), ram_mb=16_000, labels=("gpu",)), machine("cpu", cpus=2))
    fit = placer.try_claim(req("R1.fit.1", cpus=2, gpus=2, ram_mb=500, device="gpu"))
    load = placer.try_claim(req("R1.load.1", cpus=1))
    assert isinstance(fit, Grant) and isinstance(load, Grant)
    assert seen(placer, "box")["grants"] == [{"id": "R1.fit.1", "cpus": 2, "gpus": list(fit.gpus), "ram_mb": 500,
                                              "pool": None}]
    assert seen(placer, "cpu")["grants"] == [{"id": "R1.load.1", "cpus": 1, "gpus": [], "ram_mb": 0, "pool": None}]
    placer.release(fit)
    assert seen(placer, "box")["grants"] == [] and seen(placer, "cpu")["calls"] == 1


@scenario
def snapshot_lists_machines_waiting_calls_and_provisioners():
    shapes = [(Resources(cpus=32, gpus=4, ram_mb=128_000), ("gpu", "slurm"))]
    placer = placer_with(machine("box", cpus=4, gpus=(2, 5), ram_mb=16_000, labels=("gpu",)), shapes=shapes)
    grant = placer.try_claim(req("c1", cpus=1, gpus=1, ram_mb=1000, device="gpu"))
    placer.try_claim(req("c2", cpus=1, gpus=2, device="gpu", run_id="r2", node="fit"))

    snap = placer.snapshot()
    expected = {
        "name": "box",
        "labels": ["gpu"],
        "total": {"cpus": 4, "gpus": 2, "ram_mb": 16_000},
        "gpu_ids": [2, 5],
        "free": {"cpus": 3, "gpus": 1, "ram_mb": 15_000},
        "free_gpu_ids": [gid for gid in (2, 5) if gid not in grant.gpus],
        "calls": 1,
    }
    [box] = snap["machines"]
    assert {key: box.get(key) for key in expected} == expected
    [waiting] = snap["waiting"]
    assert waiting["run_id"] == "r2" and waiting["node"] == "fit"
    assert waiting["reason"] == "waiting for a worker labelled 'gpu' with 2 gpu(s) and 1 cpu(s) free"
    assert waiting["waiting_s"] >= 0
    assert snap["provisioners"] == [{"shape": {"cpus": 32, "gpus": 4, "ram_mb": 128_000},
                                     "labels": ["gpu", "slurm"]}]


@scenario
def a_call_stops_waiting_once_granted_or_forgotten():
    placer = placer_with(machine("laptop", cpus=4, ram_mb=1000))
    first = placer.try_claim(req("c1", ram_mb=1000))
    placer.try_claim(req("c2", ram_mb=1000))
    placer.try_claim(req("c3", ram_mb=1000))
    assert sorted(w["node"] for w in placer.snapshot()["waiting"]) == ["c2", "c3"]
    placer.forget("c3")
    placer.forget("never-waited")
    placer.release(first)
    assert isinstance(placer.try_claim(req("c2", ram_mb=1000)), Grant)
    assert placer.snapshot()["waiting"] == []


@scenario
def the_waiting_reason_follows_the_latest_attempt():
    placer = placer_with(machine("laptop", cpus=2))
    placer.try_claim(req("c1", ram_mb=500, device="gpu"))
    assert placer.snapshot()["waiting"][0]["reason"].startswith("waiting for a worker labelled 'gpu'")
    placer.attach(machine("box", cpus=4, ram_mb=1000, labels=("gpu",)))
    placer.try_claim(req("hog", ram_mb=1000, device="gpu"))
    placer.try_claim(req("c1", ram_mb=500, device="gpu"))
    reasons = {w["node"]: w["reason"] for w in placer.snapshot()["waiting"]}
    assert reasons == {"c1": "waiting for a worker labelled 'gpu' with 1 cpu(s) and 500 MB RAM free"}


@scenario
def an_unlabelled_call_with_no_machine_at_all_has_a_readable_reason():
    outcome = Placer().try_claim(req("c1"))
    assert isinstance(outcome, Waiting) and outcome.no_machine is True
    assert "None" not in outcome.reason


@scenario
def snapshot_of_a_fully_busy_machine_shows_zero_free_cpus():
    placer = placer_with(machine("laptop", cpus=1))
    assert isinstance(placer.try_claim(req("c1")), Grant)
    laptop = seen(placer, "laptop")
    assert laptop["free"]["cpus"] == 0
    assert laptop["calls"] == 1


@scenario
def a_grant_names_the_queue_label_only_when_the_machine_carries_it():
    placer = placer_with(machine("box", cpus=2, labels=("gpu",)), machine("plain", cpus=2))
    labelled = placer.try_claim(req("c1", device="gpu"))
    assert isinstance(labelled, Grant) and (labelled.machine, labelled.queue_label) == ("box", "gpu")
    fallback = placer.try_claim(Request("c2", Resources(cpus=2), "tpu", DevicePolicy.PREFER))
    assert isinstance(fallback, Grant) and fallback.queue_label is None


@scenario
def waiting_again_keeps_the_call_listed_once_with_its_first_wait():
    clock = Clock()
    placer = placer_with(machine("laptop", cpus=1), clock=clock)
    placer.try_claim(req("hog"))
    placer.try_claim(req("c1"))
    for _ in range(5):
        clock.advance(1)
        assert isinstance(placer.try_claim(req("c1")), Waiting)
    [waiting] = placer.snapshot()["waiting"]
    assert (waiting["node"], waiting["waiting_s"]) == ("c1", 5.0)
    placer.forget("c1")
    assert placer.snapshot()["waiting"] == []
    placer.try_claim(req("c1"))  # waits again after being forgotten: listed again, from now
    assert [(w["node"], w["waiting_s"]) for w in placer.snapshot()["waiting"]] == [("c1", 0.0)]


@scenario
def a_changed_reason_is_written_again():
    placer = placer_with(machine("laptop", cpus=1))
    placer.try_claim(req("c1", device="gpu"))
    placer.attach(machine("box", cpus=1, labels=("gpu",)))
    placer.try_claim(req("hog", device="gpu"))
    placer.try_claim(req("c1", device="gpu"))
    [waiting] = [w for w in placer.snapshot()["waiting"] if w["node"] == "c1"]
    assert waiting["reason"] == "waiting for a worker labelled 'gpu' with 1 cpu(s) free"


@scenario
def drivers_sharing_a_placer_from_threads_never_over_commit_and_keep_the_waiting_list_right():
    placer = placer_with(machine("a", cpus=3), machine("b", cpus=2))
    outcomes: dict[str, Grant | Waiting] = {}
    start = threading.Barrier(12)

    def claim(i: int) -> None:
        start.wait()
        outcomes[f"c{i}"] = placer.try_claim(req(f"c{i}"))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    granted = {cid for cid, o in outcomes.items() if isinstance(o, Grant)}
    assert len(granted) == 5
    assert {w["node"] for w in placer.snapshot()["waiting"]} == set(outcomes) - granted
    for cid in granted:
        placer.release(outcomes[cid])  # type: ignore[arg-type]
    retried = [placer.try_claim(req(cid)) for cid in sorted(set(outcomes) - granted)]
    assert sum(isinstance(o, Grant) for o in retried) == 5
    assert len(placer.snapshot()["waiting"]) == 2


# -- a grant is its call's ledger entry ------------------------------------------------------------


@scenario
def a_held_grants_call_starts_exactly_once():
    placer = placer_with(machine("m", cpus=2))
    grant = placer.try_claim(req("c1"))
    assert isinstance(grant, Grant)
    assert placer.start(grant, "delivery-1") is True
    assert placer.start(grant, "delivery-2") is False  # a redelivered copy while the call runs is dropped


@scenario
def asking_again_for_the_same_delivery_gets_the_same_answer():
    # A client that lost the answer to its start (a dropped connection) sends it again: the call must
    # still run, not be dropped by its own first attempt.
    placer = placer_with(machine("m", cpus=2))
    grant = placer.try_claim(req("c1"))
    assert placer.start(grant, "delivery-1") is True
    assert placer.start(grant, "delivery-1") is True
    assert placer.start(grant, "delivery-2") is False


@scenario
def a_call_whose_grant_was_given_back_never_starts():
    # The driver settled it (retried elsewhere, cancelled) before the message reached a worker.
    placer = placer_with(machine("m", cpus=2))
    grant = placer.try_claim(req("c1"))
    placer.release(grant)
    assert placer.start(grant, "delivery-1") is False


@scenario
def a_call_that_finished_never_starts_again():
    placer = placer_with(machine("m", cpus=2))
    grant = placer.try_claim(req("c1"))
    assert placer.start(grant, "delivery-1") is True
    placer.release(grant)  # the worker gives the grant back when the call ends
    assert placer.start(grant, "delivery-1") is False
    assert placer.start(grant, "delivery-2") is False


@scenario
def a_call_granted_before_its_machine_attached_again_never_starts():
    placer = placer_with(machine("m", cpus=2))
    grant = placer.try_claim(req("c1"))
    placer.attach(machine("m", cpus=2))  # the worker restarted: grants of its earlier start are void
    assert placer.start(grant, "delivery-1") is False
    other = placer.try_claim(req("c2"))
    assert isinstance(other, Grant) and placer.start(other, "delivery-2") is True


@scenario
def a_grant_nobody_made_never_starts():
    placer = placer_with(machine("m", cpus=2))
    assert placer.start(Grant(id="forged", machine="m", cpus=1), "delivery-1") is False
    assert placer.start(Grant(id="forged", machine="nowhere", cpus=1), "delivery-1") is False


# -- a driver that died leaves no call waiting forever ---------------------------------------------


def waiting_nodes(placer: Placer, stale_after_s: float | None = None) -> list[str]:
    return [w["node"] for w in placer.snapshot(stale_after_s=stale_after_s)["waiting"]]


@scenario
def a_waiting_call_nobody_keeps_is_dropped_once_stale():
    clock = Clock()
    placer = placer_with(machine("m", cpus=1), clock=clock)
    assert isinstance(placer.try_claim(req("busy")), Grant)
    assert isinstance(placer.try_claim(req("kept")), Waiting)
    assert isinstance(placer.try_claim(req("orphan")), Waiting)
    clock.advance(0.3)
    placer.keep_waiting(["kept"])  # its driver is alive; the orphan's died
    assert sorted(waiting_nodes(placer, stale_after_s=0.2)) == ["kept"]
    assert waiting_nodes(placer) == ["kept"]  # the orphan is gone from the books, not only from the view


@scenario
def without_a_stale_limit_every_waiting_call_is_listed():
    clock = Clock()
    placer = placer_with(machine("m", cpus=1), clock=clock)
    placer.try_claim(req("busy"))
    placer.try_claim(req("a"))
    clock.advance(0.05)
    assert waiting_nodes(placer) == ["a"]
    assert waiting_nodes(placer, stale_after_s=60) == ["a"]


@scenario
def keeping_a_call_that_no_longer_waits_lists_nothing():
    placer = placer_with(machine("m", cpus=1))
    grant = placer.try_claim(req("busy"))
    placer.try_claim(req("a"))
    placer.release(grant)
    assert isinstance(placer.try_claim(req("a")), Grant)  # taken off the list
    placer.keep_waiting(["a"])  # a driver's keep racing with the grant
    assert waiting_nodes(placer, stale_after_s=60) == []
    assert waiting_nodes(placer) == []


@scenario
def given_back_names_the_grants_no_longer_held():
    placer = placer_with(machine("m", cpus=3))
    kept, returned, voided = (placer.try_claim(req(c)) for c in ("kept", "returned", "voided"))
    placer.release(returned)
    assert placer.given_back([kept, returned]) == {"returned"}
    placer.attach(machine("m", cpus=3))  # restarted: every grant of its earlier start is void
    assert placer.given_back([kept, voided]) == {"kept", "voided"}
    assert placer.given_back([]) == set()


@scenario
def a_grant_of_a_machine_that_attached_again_is_lost():
    placer = placer_with(machine("m", cpus=2))
    grant = placer.try_claim(req("c1"))
    assert placer.lost(grant) is False
    placer.attach(machine("m", cpus=2))  # the worker restarted: its calls died with it
    assert placer.lost(grant) is True


@scenario
def a_long_waiting_call_whose_reason_changes_stays_listed():
    clock = Clock()
    placer = placer_with(machine("m", cpus=1, ram_mb=100), clock=clock)
    placer.try_claim(req("busy"))
    placer.try_claim(req("w"))  # waits for a cpu
    clock.advance(0.3)
    placer.keep_waiting(["w"])
    placer.try_claim(req("w", ram_mb=100))  # now it also waits for RAM: a new reason, noted now
    assert waiting_nodes(placer, stale_after_s=0.2) == ["w"]
