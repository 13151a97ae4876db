"""The FedKT-CSD wire format, shared by sites and server: per-class statistics, their payload and fixed point.

Layout, per class c in order, then classes one after another (flat length L = C * (d+1)(d+2)/2):

    sums[c]         d            sum of clipped latents
    outer_upper[c]  d(d+1)/2     upper triangle (row-major, diagonal included) of sum z z^T
    counts[c]       1            number of records

The float32 payload is what the privacy officer reads and what the paper sizes (335,400 bytes for d = 128 and
10 classes). What a site sends is the same layout in fixed point on the ring Z/2^64, masked (`secure_agg`).

Fixed point: a clipped latent z (||z|| <= R) is truncated towards zero onto the grid R * 2^-FRACTION_BITS, so
that z = R * q * 2^-FRACTION_BITS with integer q and ||q|| <= 2^FRACTION_BITS (truncation never lengthens z,
so the DP sensitivities stay exactly R and R^2). Sums then have scale R * 2^-13, sums of outer products
R^2 * 2^-26, counts 1: every entry of every partial sum is an integer of magnitude at most
records * 2^26 <= 2^50 for up to MAX_RECORDS = 2^24 records over all sites. That keeps the float64 sums exact,
so encoding, masking, summing and decoding give the same integers whatever the partition of the records over
sites, and the ring sum (two's complement, |value| < 2^63) can never wrap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

FRACTION_BITS = 13
MAX_RECORDS = 2**24
_MAX_MAGNITUDE = MAX_RECORDS * 2 ** (2 * FRACTION_BITS)  # 2^50: exact in float64 with room for rounding
PAYLOAD_DTYPE = np.dtype("<f4")
RING_DTYPE = np.dtype("<u8")


def class_length(dim: int) -> int:
    """Entries per class: d + d(d+1)/2 + 1 = (d+1)(d+2)/2."""
    return (dim + 1) * (dim + 2) // 2


def payload_nbytes(dim: int, num_classes: int) -> int:
    """Size of the float32 payload in bytes."""
    return num_classes * class_length(dim) * PAYLOAD_DTYPE.itemsize


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


@dataclass(frozen=True)
class ClassStatistics:
    """Per-class sufficient statistics of clipped latents, float64, in latent units."""

    sums: np.ndarray  # (C, d)
    outer_upper: np.ndarray  # (C, d(d+1)/2)
    counts: np.ndarray  # (C,)

    def __post_init__(self) -> None:
        num_classes, dim = self.sums.shape
        if self.outer_upper.shape != (num_classes, dim * (dim + 1) // 2) or self.counts.shape != (num_classes,):
            raise ValueError(f"inconsistent statistics shapes: sums {self.sums.shape}, outer_upper "
                             f"{self.outer_upper.shape}, counts {self.counts.shape}")
        if not all(np.isfinite(a).all() for a in (self.sums, self.outer_upper, self.counts)):
            raise ValueError("statistics contain NaN or infinite values")

    @property
    def num_classes(self) -> int:
        return self.sums.shape[0]

    @property
    def dim(self) -> int:
        return self.sums.shape[1]

    def to_flat(self) -> np.ndarray:
        """The documented layout as one float64 vector."""
        return np.concatenate([self.sums, self.outer_upper, self.counts[:, None]], axis=1).reshape(-1)

    @classmethod
    def from_flat(cls, flat: np.ndarray, num_classes: int) -> ClassStatistics:
        dim = _dim_from_length(flat.size, num_classes)
        rows = np.asarray(flat, dtype=np.float64).reshape(num_classes, class_length(dim))
        split = dim + dim * (dim + 1) // 2
        return cls(rows[:, :dim].copy(), rows[:, dim:split].copy(), rows[:, split].copy())

    def to_payload(self) -> np.ndarray:
        """The float32 payload (rounds the float64 sums to float32)."""
        return self.to_flat().astype(PAYLOAD_DTYPE)

    @classmethod
    def from_payload(cls, payload: np.ndarray, num_classes: int) -> ClassStatistics:
        if payload.dtype != PAYLOAD_DTYPE or payload.ndim != 1:
            raise ValueError(f"payload must be a 1-D little-endian float32 array, got {payload.dtype} {payload.shape}")
        return cls.from_flat(payload, num_classes)

    def to_bytes(self) -> bytes:
        return self.to_payload().tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, num_classes: int) -> ClassStatistics:
        if len(data) % PAYLOAD_DTYPE.itemsize:
            raise ValueError(f"{len(data)} bytes is not a whole number of float32 values")
        return cls.from_payload(np.frombuffer(data, dtype=PAYLOAD_DTYPE), num_classes)


def fixed_point_scales(clip_norm: float) -> tuple[float, float]:
    """Latent units per integer step for (sums, sums of outer products); counts have scale 1."""
    step = clip_norm * 2.0**-FRACTION_BITS
    return step, step * step


def quantize_latents(clipped: np.ndarray, clip_norm: float) -> np.ndarray:
    """(N, d) clipped latents -> integer-valued float64 q with z ~= q * R * 2^-FRACTION_BITS, |q| truncated."""
    q = np.trunc(np.asarray(clipped, dtype=np.float64) / fixed_point_scales(clip_norm)[0])
    if (np.square(q).sum(axis=1) > 4.0**FRACTION_BITS).any():
        raise ValueError(f"latents are not clipped to norm {clip_norm}: clip before quantizing")
    return q


def check_capacity(num_records: int) -> None:
    """Refuse a record count for which the fixed-point sums could lose exactness or overflow the ring."""
    if num_records > MAX_RECORDS:
        raise ValueError(f"{num_records} records exceed the fixed-point capacity of {MAX_RECORDS} "
                         f"(FRACTION_BITS = {FRACTION_BITS}); a larger federation needs a smaller FRACTION_BITS, "
                         "the same on every site and the server")


def to_ring(stats: ClassStatistics, clip_norm: float) -> np.ndarray:
    """Fixed-point encoding on Z/2^64: round(value / scale), negative values as two's complement."""
    check_capacity(int(stats.counts.sum()))
    integers = np.rint(stats.to_flat() / _scale_vector(stats.dim, stats.num_classes, clip_norm))
    if np.abs(integers).max(initial=0.0) > _MAX_MAGNITUDE:
        raise ValueError("statistics exceed the fixed-point range: were the latents clipped to the clip norm?")
    return integers.astype(np.int64).view(RING_DTYPE)


def from_ring(vector: np.ndarray, num_classes: int, clip_norm: float) -> ClassStatistics:
    """Decode a (summed) ring vector: uint64 read as two's-complement int64, times the fixed-point scales."""
    if vector.dtype != RING_DTYPE or vector.ndim != 1:
        raise ValueError(f"ring vector must be 1-D little-endian uint64, got {vector.dtype} {vector.shape}")
    dim = _dim_from_length(vector.size, num_classes)
    integers = vector.view(np.int64)
    if ((integers > _MAX_MAGNITUDE) | (integers < -_MAX_MAGNITUDE)).any():
        raise ValueError("decoded sums exceed the fixed-point range: masks did not cancel or too many records")
    stats = ClassStatistics.from_flat(integers * _scale_vector(dim, num_classes, clip_norm), num_classes)
    check_capacity(int(stats.counts.sum()))
    return stats


def _scale_vector(dim: int, num_classes: int, clip_norm: float) -> np.ndarray:
    step, outer_step = fixed_point_scales(clip_norm)
    per_class = np.concatenate([np.full(dim, step), np.full(dim * (dim + 1) // 2, outer_step), [1.0]])
    return np.tile(per_class, num_classes)


def _dim_from_length(length: int, num_classes: int) -> int:
    per_class, rest = divmod(length, num_classes)
    dim = (math.isqrt(8 * per_class + 1) - 3) // 2 if per_class else -1
    if rest or dim < 1 or class_length(dim) != per_class:
        raise ValueError(f"{length} values do not form {num_classes} classes of (d+1)(d+2)/2 values each")
    return dim
