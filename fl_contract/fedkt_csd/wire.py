"""The FedKT-CSD wire format, shared by sites and server: layout and fixed point of the per-class statistics.

Layout, per class c in order, then classes one after another (flat length L = C * (d+1)(d+2)/2):

    sums[c]         d            sum of clipped latents
    outer_upper[c]  d(d+1)/2     upper triangle (row-major, diagonal included) of sum z z^T
    counts[c]       1            number of records

A site sends this layout as integers on the ring Z/2^64 (RING_DTYPE), masked (`site_agent.secure_aggregation.protocol`);
the privacy officer reads it unmasked (`site-agent fedkt export`). Only the server turns it into numbers in latent
units (`from_ring`).

Fixed point: a clipped latent z (||z|| <= R) is truncated towards zero onto the grid R * 2^-FRACTION_BITS, so
that z = R * q * 2^-FRACTION_BITS with integer q and ||q|| <= 2^FRACTION_BITS (truncation never lengthens z,
so the DP sensitivities stay exactly R and R^2). Sums then have scale R * 2^-13, sums of outer products
R^2 * 2^-26, counts 1. Sites quantise each record once and add the integers q, q q^T and 1 in the ring, where
addition is exact and order-free, so any partition of the records over sites gives the same bits. For up to
MAX_RECORDS = 2^24 records over all sites every entry of every sum has magnitude at most records * 2^26 <= 2^50:
far from wrapping the two's-complement range (|value| < 2^63), and exact in the server's float64 decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fl_contract.ring import RING_DTYPE

FRACTION_BITS = 13
MAX_RECORDS = 2**24
_MAX_MAGNITUDE = MAX_RECORDS * 2 ** (2 * FRACTION_BITS)  # 2^50: exact in float64


def class_length(dim: int) -> int:
    """Entries per class: d + d(d+1)/2 + 1 = (d+1)(d+2)/2."""
    return (dim + 1) * (dim + 2) // 2


def upper_triangle(matrices: np.ndarray) -> np.ndarray:
    """(..., d, d) -> (..., d(d+1)/2): the row-major upper triangle, diagonal included."""
    rows, cols = np.triu_indices(matrices.shape[-1])
    return matrices[..., rows, cols]


def full_matrix(upper: np.ndarray, dim: int) -> np.ndarray:
    """(..., d(d+1)/2) -> (..., d, d): the symmetric matrix whose upper triangle is `upper`."""
    rows, cols = np.triu_indices(dim)
    out = np.zeros(upper.shape[:-1] + (dim, dim), dtype=upper.dtype)
    out[..., rows, cols] = upper
    out[..., cols, rows] = upper
    return out


def join_fields(sums: np.ndarray, outer_upper: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(C, d), (C, d(d+1)/2), (C,) of one dtype -> the flat layout."""
    _check_shapes(sums, outer_upper, counts)
    return np.concatenate([sums, outer_upper, counts[:, None]], axis=1).reshape(-1)


def split_fields(flat: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The flat layout -> copies of (sums (C, d), outer_upper (C, d(d+1)/2), counts (C,)), dtype kept."""
    dim = _dim_from_length(flat.size, num_classes)
    rows = flat.reshape(num_classes, class_length(dim))
    split = dim + dim * (dim + 1) // 2
    return rows[:, :dim].copy(), rows[:, dim:split].copy(), rows[:, split].copy()


@dataclass(frozen=True)
class ClassStatistics:
    """Per-class statistics in latent units, float64: the server's decoded sums and their DP-noised release."""

    sums: np.ndarray  # (C, d)
    outer_upper: np.ndarray  # (C, d(d+1)/2)
    counts: np.ndarray  # (C,)

    def __post_init__(self) -> None:
        _check_shapes(self.sums, self.outer_upper, self.counts)
        if not all(np.isfinite(a).all() for a in (self.sums, self.outer_upper, self.counts)):
            raise ValueError("statistics contain NaN or infinite values")

    @property
    def num_classes(self) -> int:
        return int(self.sums.shape[0])

    @property
    def dim(self) -> int:
        return int(self.sums.shape[1])

    def to_flat(self) -> np.ndarray:
        """The documented layout as one float64 vector."""
        return join_fields(*(np.asarray(a, dtype=np.float64) for a in (self.sums, self.outer_upper, self.counts)))


def fixed_point_scales(clip_norm: float) -> tuple[float, float]:
    """Latent units per integer step for (sums, sums of outer products); counts have scale 1."""
    step = clip_norm * 2.0**-FRACTION_BITS
    return step, step * step


def quantize_latents(clipped: np.ndarray, clip_norm: float) -> np.ndarray:
    """(N, d) clipped float64 latents -> int64 q with z ~= q * R * 2^-FRACTION_BITS, |q| truncated."""
    q = np.trunc(np.asarray(clipped, dtype=np.float64) / fixed_point_scales(clip_norm)[0]).astype(np.int64)
    if (np.square(q).sum(axis=1) > 4**FRACTION_BITS).any():
        raise ValueError(f"latents are not clipped to norm {clip_norm}: clip before quantizing")
    return q


def check_capacity(num_records: int) -> None:
    """Refuse a record count for which the fixed-point sums could leave the exactly decodable range."""
    if num_records > MAX_RECORDS:
        raise ValueError(f"{num_records} records exceed the fixed-point capacity of {MAX_RECORDS} "
                         f"(FRACTION_BITS = {FRACTION_BITS}); a larger federation needs a smaller FRACTION_BITS, "
                         "the same on every site and the server")


def ring_fields(vector: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A (summed) ring vector as signed integers (sums, outer_upper, counts), refused outside the fixed-point range."""
    if vector.dtype != RING_DTYPE or vector.ndim != 1:
        raise ValueError(f"ring vector must be 1-D little-endian uint64, got {vector.dtype} {vector.shape}")
    integers = vector.view(np.int64)
    if ((integers > _MAX_MAGNITUDE) | (integers < -_MAX_MAGNITUDE)).any():
        raise ValueError("decoded sums exceed the fixed-point range: masks did not cancel or too many records")
    sums, outer_upper, counts = split_fields(integers, num_classes)
    if (counts < 0).any():
        raise ValueError(f"negative record counts {counts.tolist()}: masks did not cancel")
    check_capacity(int(counts.sum()))
    return sums, outer_upper, counts


def from_ring(vector: np.ndarray, num_classes: int, clip_norm: float) -> ClassStatistics:
    """Decode a (summed) ring vector into latent units: its signed integers times the fixed-point scales."""
    sums, outer_upper, counts = ring_fields(vector, num_classes)
    step, outer_step = fixed_point_scales(clip_norm)
    return ClassStatistics(sums * step, outer_upper * outer_step, counts.astype(np.float64))


def _check_shapes(sums: np.ndarray, outer_upper: np.ndarray, counts: np.ndarray) -> None:
    num_classes, dim = sums.shape
    if outer_upper.shape != (num_classes, dim * (dim + 1) // 2) or counts.shape != (num_classes,):
        raise ValueError(f"inconsistent statistics shapes: sums {sums.shape}, outer_upper {outer_upper.shape}, "
                         f"counts {counts.shape}")


def _dim_from_length(length: int, num_classes: int) -> int:
    per_class, rest = divmod(length, num_classes)
    dim = (math.isqrt(8 * per_class + 1) - 3) // 2 if per_class else -1
    if rest or dim < 1 or class_length(dim) != per_class:
        raise ValueError(f"{length} values do not form {num_classes} classes of (d+1)(d+2)/2 values each")
    return dim
