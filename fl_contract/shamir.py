"""Rebuilding many Shamir secrets at once, over pycryptodome's GF(2^128).

The field, encoding and polynomial form are those of pycryptodome's `Shamir`: x^128 + x^7 + x^2 + x + 1, a 16-byte
value read as a big-endian integer whose bit i is the coefficient of x^i, the secret the constant term and holder x
the integer x as a field element. Shares pass between this module and `Shamir.split` / `Shamir.combine` either way
(tested). What differs is the cost. `Shamir.combine` recomputes the Lagrange coefficients of every secret, about t^2
multiplications in pure Python, each a loop over 128 bits; the server rebuilds one or two secrets per site, so a
session cost about n t^2 of them. Here:

- the Lagrange coefficients at 0 of the full holder set {1..K}, c_j = prod_{m != j} m / (m + j), are computed once
  per K; for a secret whose shares from the holders in M are missing, the coefficient of holder j is
  c_j prod_{m in M} (m + j) / m, which costs |M| multiplications by a small element (m + j < 2^16) and one full
  multiplication per share, instead of t;
- every multiplication runs on numpy arrays holding the shares of all secrets at once.

Splitting evaluates the polynomial at x = 1..K by Horner's rule on arrays too (multiplications by the small x only).

A secret with more than t shares is rebuilt twice, from all of them and from all but the first (both at least t):
a single wrong share changes the two results by different amounts (its coefficient differs by the factor
(x_first + x) / x_first != 1), so the caller learns which secrets' shares disagree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

HALF_BYTES = 16  # one field element; a 32-byte secret is shared as its two halves
_POLY = (1 << 128) | 0x87
_REDUCE = np.uint64(0x87)
_CHUNK = 8192  # elements per pass: keeps the working arrays in cache


def multiply_int(a: int, b: int) -> int:
    """The product of two field elements given as 128-bit integers (pycryptodome's encoding)."""
    product = 0
    while b:
        if b & 1:
            product ^= a
        b >>= 1
        a <<= 1
        if a >> 128:
            a ^= _POLY
    return product


def inverse_int(a: int) -> int:
    """The inverse of a non-zero field element (extended Euclid over GF(2)[x]; Hankerson et al., Algorithm 2.48)."""
    if not a:
        raise ZeroDivisionError("0 has no inverse in GF(2^128)")
    u, v, g1, g2 = a, _POLY, 1, 0
    while u != 1:
        shift = u.bit_length() - v.bit_length()
        if shift < 0:
            u, v, g1, g2, shift = v, u, g2, g1, -shift
        u ^= v << shift
        g1 ^= g2 << shift
    return g1


def multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise products of (2, N) arrays of field elements (rows: high and low 64 bits)."""
    out = np.zeros_like(a)
    for start in range(0, a.shape[1], _CHUNK):
        window = slice(start, start + _CHUNK)
        _multiply_into(out[:, window], a[:, window], b[:, window], 128)
    return out


def multiply_small(a: np.ndarray, small: np.ndarray) -> np.ndarray:
    """Element-wise products of a (2, N) array with (N,) elements below 2^16 (holder indices and their sums)."""
    factor = np.zeros_like(a)
    factor[1] = small
    bits = int(small.max()).bit_length() if small.size else 0
    out = np.zeros_like(a)
    for start in range(0, a.shape[1], _CHUNK):
        window = slice(start, start + _CHUNK)
        _multiply_into(out[:, window], a[:, window], factor[:, window], bits)
    return out


def _multiply_into(out: np.ndarray, a: np.ndarray, b: np.ndarray, bits: int) -> None:
    """out ^= a * b, where b has no bit at or above `bits`: shift-and-add over b's bits, a times x each step."""
    hi, lo = a[0].copy(), a[1].copy()
    mask, scratch, carry = (np.empty_like(lo) for _ in range(3))
    for bit in range(bits):
        word = b[1] if bit < 64 else b[0]
        np.right_shift(word, bit % 64, out=mask)
        np.bitwise_and(mask, 1, out=mask)
        np.negative(mask, out=mask)  # all ones where the bit is set
        np.bitwise_and(hi, mask, out=scratch)
        out[0] ^= scratch
        np.bitwise_and(lo, mask, out=scratch)
        out[1] ^= scratch
        np.right_shift(hi, 63, out=carry)
        np.left_shift(hi, 1, out=hi)
        np.right_shift(lo, 63, out=scratch)
        hi |= scratch
        np.left_shift(lo, 1, out=lo)
        np.multiply(carry, _REDUCE, out=carry)
        lo ^= carry


def _elements(values: Sequence[int]) -> np.ndarray:
    return np.array([[v >> 64 for v in values], [v & (2**64 - 1) for v in values]], dtype=np.uint64).reshape(2, -1)


@lru_cache(maxsize=16)
def _full_set(holders: int) -> tuple[np.ndarray, np.ndarray]:
    """(c, inv), each (2, holders + 1) and indexed by x: Lagrange coefficients at 0 of {1..holders}, and 1/x."""
    coefficients, inverses = [0], [0]
    for j in range(1, holders + 1):
        numerator = denominator = 1
        for m in range(1, holders + 1):
            if m != j:
                numerator, denominator = multiply_int(numerator, m), multiply_int(denominator, m ^ j)
        coefficients.append(multiply_int(numerator, inverse_int(denominator)))
        inverses.append(inverse_int(j))
    return _elements(coefficients), _elements(inverses)


def split(secrets: Sequence[bytes], threshold: int, holders: int) -> list[list[bytes]]:
    """`threshold`-of-`holders` shares of each 32-byte secret (its two halves shared alike): the share of holder x
    is p(x), p of degree t - 1 with the half as constant term and random other coefficients, as `Shamir.split`."""
    if any(len(secret) != 2 * HALF_BYTES for secret in secrets) or not 1 <= threshold <= holders < 2**16:
        raise ValueError(f"cannot split {[len(s) for s in secrets]}-byte secrets {threshold} of {holders}: secrets "
                         "are 32 bytes and 1 <= threshold <= holders < 65536")
    halves = 2 * len(secrets)
    x = np.tile(np.arange(1, holders + 1, dtype=np.uint64), halves)
    share: np.ndarray = np.zeros((2, halves * holders), dtype=np.uint64)
    for constant in [*(os.urandom(HALF_BYTES * halves) for _ in range(threshold - 1)), b"".join(secrets)]:
        terms = np.frombuffer(constant, dtype=">u8").reshape(halves, 2).T.astype(np.uint64)
        share = multiply_small(share, x) ^ np.repeat(terms, holders, axis=1)
    data = np.ascontiguousarray(share.T).astype(">u8").tobytes()  # half h, holder x at (h K + x - 1) * 16
    def half(h: int, j: int) -> bytes:
        start = (h * holders + j) * HALF_BYTES
        return data[start:start + HALF_BYTES]
    return [[half(2 * i, j) + half(2 * i + 1, j) for j in range(holders)] for i in range(len(secrets))]


def rebuild(shares: Sequence[Mapping[int, bytes]], holders: int, threshold: int) -> tuple[list[bytes], list[int]]:
    """The secrets from their shares (per secret: holder x in 1..`holders` -> 32-byte share), and the indices of
    the secrets whose shares disagree (rebuilt from all shares and from all but the first, when more than t)."""
    if not shares:
        return [], []
    short = [i for i, given in enumerate(shares) if len(given) < threshold]
    if short or any(not 1 <= x <= holders for given in shares for x in given):
        raise ValueError(f"secrets {short} have fewer than {threshold} shares, or a holder index is outside "
                         f"1..{holders}")
    coefficients, inverses = _full_set(holders)
    xs = [sorted(given) for given in shares]
    owner = np.repeat(np.arange(len(xs)), [len(x) for x in xs])
    x = np.array([v for row in xs for v in row], dtype=np.uint64)
    starts = np.concatenate([[0], np.cumsum([len(row) for row in xs])[:-1]])
    values = np.frombuffer(b"".join(shares[i][v] for i, row in enumerate(xs) for v in row), dtype=">u8")
    values = values.reshape(-1, 4).astype(np.uint64)  # columns: first half (high, low), second half (high, low)
    # the missing holders M of each secret, padded with 0
    missing = [sorted(set(range(1, holders + 1)) - set(row)) for row in xs]
    width = max(len(row) for row in missing)
    gaps = np.array([row + [0] * (width - len(row)) for row in missing], dtype=np.uint64).reshape(len(xs), width)
    scale = _elements([1] * len(xs))  # prod over M of 1 / m
    lam = coefficients[:, x]
    for column in range(width):
        m = gaps[:, column]
        scale = multiply(scale, np.where(m > 0, inverses[:, m], _elements([1])))
        m_pair = m[owner]
        lam = multiply_small(lam, np.where(m_pair > 0, m_pair ^ x, 1))
    lam = multiply(lam, scale[:, owner])
    secrets = _combine(lam, values, starts)
    # the second rebuild: without each secret's first share, where more than t
    again = np.array([i for i, row in enumerate(xs) if len(row) > threshold], dtype=np.int64)
    keep = np.isin(owner, again) & (np.arange(x.size) != starts[owner])
    first = x[starts[owner[keep]]]
    lam_b = multiply(multiply_small(lam[:, keep], first ^ x[keep]), inverses[:, first])
    starts_b = np.searchsorted(owner[keep], again)
    check = _combine(lam_b, values[keep], starts_b) if again.size else []
    disagree = [int(i) for i, other in zip(again, check, strict=True) if other != secrets[i]]
    return secrets, disagree


def _combine(lam: np.ndarray, values: np.ndarray, starts: np.ndarray) -> list[bytes]:
    """sum_j lam_j y_j per secret (shares of one secret contiguous from its start) for both halves: 32 bytes each."""
    both = multiply(np.concatenate([lam, lam], axis=1), np.concatenate([values[:, :2].T, values[:, 2:].T], axis=1))
    first, second = both[:, :lam.shape[1]], both[:, lam.shape[1]:]
    words = np.concatenate([np.bitwise_xor.reduceat(half, starts, axis=1) for half in (first, second)])
    data = np.ascontiguousarray(words.T).astype(">u8").tobytes()
    return [data[i:i + 32] for i in range(0, len(data), 32)]
