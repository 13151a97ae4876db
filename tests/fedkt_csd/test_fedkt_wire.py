"""The FedKT-CSD wire format: layout and size of the statistics vector, fixed point on Z/2^64."""

import numpy as np
import pytest

from fl_contract.fedkt_csd.wire import (
    FRACTION_BITS,
    MAX_RECORDS,
    RING_DTYPE,
    ClassStatistics,
    check_capacity,
    class_length,
    fixed_point_scales,
    from_ring,
    full_matrix,
    join_fields,
    quantize_latents,
    ring_fields,
    split_fields,
    upper_triangle,
)


def _ring(sums, outer_upper, counts):
    """A ring vector from signed integer fields, two's complement as a site writes it."""
    return join_fields(*(np.asarray(a, dtype=np.int64).astype(RING_DTYPE) for a in (sums, outer_upper, counts)))


def test_vector_for_d128_and_10_classes_is_670800_bytes():
    vector = _ring(np.zeros((10, 128)), np.zeros((10, 8256)), np.zeros(10))

    assert vector.dtype == RING_DTYPE and vector.size == 10 * class_length(128) == 83_850
    assert vector.nbytes == 670_800  # the paper's float32 layout would be half: 335,400


def test_layout_is_sums_then_outer_upper_then_count_per_class():
    sums, outer_upper, counts = np.arange(6).reshape(3, 2), np.arange(10, 19).reshape(3, 3), np.array([7, 8, 9])

    flat = join_fields(sums, outer_upper, counts)

    np.testing.assert_array_equal(flat[:6], [0, 1, 10, 11, 12, 7])
    for field, back in zip((sums, outer_upper, counts), split_fields(flat, num_classes=3)):
        np.testing.assert_array_equal(back, field)
        assert back.dtype == field.dtype


def test_vector_of_wrong_length_is_refused():
    with pytest.raises(ValueError, match="do not form 3 classes"):
        ring_fields(np.zeros(22, dtype=RING_DTYPE), num_classes=3)


def test_upper_triangle_is_row_major_with_diagonal():
    matrix = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])

    upper = upper_triangle(matrix)

    np.testing.assert_array_equal(upper, [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(full_matrix(upper, 3), matrix)


def test_ring_decodes_negative_integers_onto_the_grid():
    clip_norm = 3.0
    step, outer_step = fixed_point_scales(clip_norm)
    ring = _ring([[-5, 7]], [[3, -2, 9]], [4])

    stats = from_ring(ring, num_classes=1, clip_norm=clip_norm)

    assert ring[0] == 2**64 - 5  # two's complement
    np.testing.assert_array_equal(stats.to_flat(), [-5 * step, 7 * step, 3 * outer_step, -2 * outer_step,
                                                    9 * outer_step, 4.0])


def test_ring_sum_wraps_where_signs_differ_and_decodes_to_the_integer_sum():
    rng = np.random.default_rng(1)
    a, b = (rng.integers(-2**40, 2**40, size=(2, 9)) for _ in range(2))  # d = 3: 3 sums, 6 outer products
    counts = np.array([[3, 4], [5, 6]])

    total = _ring(a[:, :3], a[:, 3:], counts[0]) + _ring(b[:, :3], b[:, 3:], counts[1])

    sums, outer_upper, total_counts = ring_fields(total, num_classes=2)
    np.testing.assert_array_equal(sums, a[:, :3] + b[:, :3])
    np.testing.assert_array_equal(outer_upper, a[:, 3:] + b[:, 3:])
    np.testing.assert_array_equal(total_counts, [8, 10])


def test_quantizing_truncates_towards_zero_and_refuses_unclipped_latents():
    step, _ = fixed_point_scales(2.0)

    q = quantize_latents(np.array([[1.7 * step, -1.7 * step]]), clip_norm=2.0)

    assert q.dtype == np.int64
    np.testing.assert_array_equal(q, [[1, -1]])
    with pytest.raises(ValueError, match="not clipped to norm 2.0"):
        quantize_latents(np.array([[2.0, 0.5]]), clip_norm=2.0)


def test_vectors_whose_masks_did_not_cancel_are_refused():
    masked = np.random.default_rng(0).integers(0, 2**64 - 1, class_length(2), dtype=np.uint64, endpoint=True)

    with pytest.raises(ValueError, match="exceed the fixed-point range"):
        ring_fields(masked, num_classes=1)
    with pytest.raises(ValueError, match="negative record counts"):
        ring_fields(_ring([[0, 0]], [[0, 0, 0]], [-1]), num_classes=1)


def test_capacity_bound_keeps_every_sum_exact_in_float64_and_the_ring():
    worst_integer = MAX_RECORDS * 4**FRACTION_BITS  # every record at ||q|| = 2^FRACTION_BITS on one coordinate

    check_capacity(MAX_RECORDS)

    assert worst_integer <= 2**50 < 2**53 < 2**63
    with pytest.raises(ValueError, match="fixed-point capacity"):
        check_capacity(MAX_RECORDS + 1)


def test_class_statistics_refuse_inconsistent_shapes_and_non_finite_values():
    with pytest.raises(ValueError, match="inconsistent statistics shapes"):
        ClassStatistics(np.zeros((2, 3)), np.zeros((2, 5)), np.zeros(2))
    with pytest.raises(ValueError, match="NaN or infinite"):
        ClassStatistics(np.full((1, 1), np.nan), np.zeros((1, 1)), np.zeros(1))
