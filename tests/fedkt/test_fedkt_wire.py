"""The FedKT-CSD wire format: payload size and layout, fixed point on Z/2^64."""

import numpy as np
import pytest

from fl_contract.fedkt.wire import (FRACTION_BITS, MAX_RECORDS, ClassStatistics, check_capacity, fixed_point_scales,
                                   from_ring, full_matrix, payload_nbytes, to_ring, upper_triangle)


def _random_stats(num_classes, dim, seed=0):
    rng = np.random.default_rng(seed)
    return ClassStatistics(rng.normal(size=(num_classes, dim)), rng.normal(size=(num_classes, dim * (dim + 1) // 2)),
                           rng.integers(0, 100, num_classes).astype(float))


def test_payload_for_d128_and_10_classes_is_335400_bytes():
    stats = _random_stats(10, 128)

    data = stats.to_bytes()

    assert len(data) == payload_nbytes(128, 10) == 10 * (128 + 8256 + 1) * 4 == 335_400
    assert stats.to_payload().dtype == np.float32


def test_payload_round_trip_restores_layout():
    stats = _random_stats(3, 5)

    back = ClassStatistics.from_bytes(stats.to_bytes(), num_classes=3)

    assert back.dim == 5
    np.testing.assert_allclose(back.sums, stats.sums, rtol=1e-6)
    np.testing.assert_allclose(back.outer_upper, stats.outer_upper, rtol=1e-6)
    np.testing.assert_array_equal(back.counts, stats.counts)


def test_payload_of_wrong_length_is_refused():
    with pytest.raises(ValueError, match="do not form 3 classes"):
        ClassStatistics.from_bytes(b"\0" * 4 * 22, num_classes=3)


def test_upper_triangle_is_row_major_with_diagonal():
    matrix = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])

    upper = upper_triangle(matrix)

    np.testing.assert_array_equal(upper, [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(full_matrix(upper, 3), matrix)


def test_ring_round_trip_keeps_negative_values_on_the_grid():
    clip_norm = 3.0
    step, outer_step = fixed_point_scales(clip_norm)
    stats = ClassStatistics(np.array([[-5.0 * step, 7.0 * step]]), np.array([[3.0, -2.0, 9.0]]) * outer_step,
                            np.array([4.0]))

    ring = to_ring(stats, clip_norm)
    back = from_ring(ring, num_classes=1, clip_norm=clip_norm)

    assert ring.dtype == np.uint64
    assert ring[0] == 2**64 - 5  # two's complement
    np.testing.assert_array_equal(back.to_flat(), stats.to_flat())


def test_ring_sum_of_encodings_decodes_to_the_sum():
    clip_norm = 2.0
    a, b = _random_stats(2, 3, seed=1), _random_stats(2, 3, seed=2)

    total = to_ring(a, clip_norm) + to_ring(b, clip_norm)  # wraps mod 2^64 where signs differ
    back = from_ring(total, num_classes=2, clip_norm=clip_norm)

    step, outer_step = fixed_point_scales(clip_norm)
    np.testing.assert_allclose(back.sums, a.sums + b.sums, atol=step)
    np.testing.assert_allclose(back.outer_upper, a.outer_upper + b.outer_upper, atol=outer_step)


def test_capacity_bound_keeps_every_sum_exact_in_float64_and_the_ring():
    worst_integer = MAX_RECORDS * 4**FRACTION_BITS  # every record at ||q|| = 2^FRACTION_BITS on one coordinate

    check_capacity(MAX_RECORDS)

    assert worst_integer <= 2**50 < 2**53 < 2**63
    with pytest.raises(ValueError, match="fixed-point capacity"):
        check_capacity(MAX_RECORDS + 1)
