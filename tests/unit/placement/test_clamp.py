"""Clamping a request no machine could ever grant: GPUs settled first, then cpus, then RAM."""

from __future__ import annotations

from fluksio.placement.clamp import clamp, fits
from fluksio.schemas import Resources


def R(cpus=1, gpus=0, ram_mb=0) -> Resources:  # noqa: N802 - reads like the model
    return Resources(cpus=cpus, gpus=gpus, ram_mb=ram_mb)


def test_fits_compares_every_dimension():
    shape = R(4, 2, 1000)
    assert fits(R(4, 2, 1000), shape)
    assert not fits(R(5, 2, 1000), shape)
    assert not fits(R(4, 3, 1000), shape)
    assert not fits(R(4, 2, 1001), shape)


def test_a_request_that_fits_some_machine_is_not_clamped():
    request = R(16, 1, 8000)
    shapes = [R(4, 0, 1000), R(32, 2, 64_000)]
    assert clamp(request, shapes) == (request, None)


def test_a_request_that_fits_only_a_busy_looking_small_machine_is_not_clamped():
    # clamping looks at whole machines, never at what is free right now
    request = R(2, 0, 500)
    assert clamp(request, [R(2, 0, 500)]) == (request, None)


def test_no_shapes_means_no_clamping():
    request = R(64, 8, 1_000_000)
    assert clamp(request, []) == (request, None)


def test_too_many_cpus_are_cut_to_the_largest_machine_with_a_warning():
    clamped, warning = clamp(R(cpus=64), [R(8), R(16)])
    assert clamped == R(16)
    assert warning is not None
    assert "requested 64 cpu(s)" in warning
    assert "at most 16 cpu(s)" in warning
    assert "clamped to fit" in warning


def test_gpus_are_settled_first():
    # The big-cpu machine has no GPU; the GPU machine is small. GPUs win, so cpus follow the GPU machine.
    clamped, warning = clamp(R(cpus=32, gpus=1), [R(cpus=64), R(cpus=8, gpus=2)])
    assert clamped == R(cpus=8, gpus=1)
    assert warning is not None


def test_gpus_are_cut_to_the_most_any_machine_has():
    clamped, _ = clamp(R(cpus=2, gpus=8), [R(cpus=4, gpus=2), R(cpus=4, gpus=4)])
    assert clamped == R(cpus=2, gpus=4)


def test_cpus_are_settled_before_ram():
    # Only the 32-cpu machine keeps the cpus, so RAM is cut to what that machine has,
    # although another machine has more RAM.
    clamped, _ = clamp(R(cpus=32, ram_mb=100_000), [R(cpus=32, ram_mb=1000), R(cpus=16, ram_mb=64_000)])
    assert clamped == R(cpus=32, ram_mb=1000)


def test_only_the_dimension_that_is_too_large_is_cut():
    clamped, _ = clamp(R(cpus=2, gpus=1, ram_mb=500_000), [R(cpus=8, gpus=2, ram_mb=32_000)])
    assert clamped == R(cpus=2, gpus=1, ram_mb=32_000)


def test_the_clamped_request_always_fits_some_shape():
    shapes = [R(4, 0, 64_000), R(16, 1, 8000), R(2, 4, 1000)]
    for request in [R(64, 8, 10**6), R(16, 2, 10), R(3, 0, 10**5), R(1, 3, 2000), R(20, 1, 9000)]:
        clamped, warning = clamp(request, shapes)
        assert any(fits(clamped, s) for s in shapes), (request, clamped)
        assert warning is not None
        assert clamped.cpus <= request.cpus and clamped.gpus <= request.gpus and clamped.ram_mb <= request.ram_mb
