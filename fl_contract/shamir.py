"""Rebuilding many Shamir secrets at once, over pycryptodome's GF(2^128).

The field, encoding and polynomial form are those of pycryptodome's `Shamir`: x^128 + x^7 + x^2 + x + 1, a 16-byte
value read as a big-endian integer whose bit i is the coefficient of x^i, the secret the constant term and holder x
the integer x as a field element. Shares pass between this module and `Shamir.split` / `Shamir.combine` either way
(tested). What differs is the cost. `Shamir.combine` recomputes the Lagrange coefficients of every secret, about t^2
multiplications in pure Python, each a loop over 128 bits; the server rebuilds one or two secrets per site, so a
session cost about n t^2 of them. Here:

- the Lagrange coefficients at 0 of the full holder set {1..K}, c_j = prod_{m != j} m / (m + j), are computed once
  per K; for a secret whose shares from the holders in M are missing, the coefficient of holder j is
  c_j prod_{m in M} (m + j) / m, which costs |M| multiplications by a small element (m + j < 2^16) per share
  and, for the factor prod_{m in M} 1 / m common to all of them, one full multiplication per secret, instead of t^2;
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


_FOLD = np.array([multiply_int(c, 0x87) for c in range(16)], dtype=np.uint64)  # c x^128 = c (x^7 + x^2 + x + 1)


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
    """out ^= a * b, where b has no bit at or above `bits`: 4 bits of b at a time from the top (Horner), adding
    a * v from a table of the 16 multiples of each a and multiplying by x^4, whose 4 bits above x^127 fold back as
    x^128 = x^7 + x^2 + x + 1."""
    n = a.shape[1]
    table = np.zeros((2, 16, n), dtype=np.uint64)  # word, v, element: a * v
    table[:, 1] = a
    for v in (2, 4, 8):
        half = table[:, v // 2]
        table[0, v] = (half[0] << 1) | (half[1] >> 63)
        table[1, v] = (half[1] << 1) ^ ((half[0] >> 63) * _REDUCE)
    for v in range(3, 16):
        top = 1 << (v.bit_length() - 1)
        if v != top:
            table[:, v] = table[:, top] ^ table[:, v - top]
    high, low = table[0].ravel(), table[1].ravel()
    column = np.arange(n, dtype=np.uint64)
    hi, lo = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64)
    index, carry = np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.uint64)
    for nibble in reversed(range((bits + 3) // 4)):
        np.right_shift(hi, 60, out=carry)
        np.left_shift(hi, 4, out=hi)
        hi |= lo >> 60
        np.left_shift(lo, 4, out=lo)
        lo ^= _FOLD[carry]
        word = b[1] if nibble < 16 else b[0]
        np.right_shift(word, 4 * (nibble % 16), out=index)
        index &= 15
        index *= n
        index += column
        hi ^= high[index]
        lo ^= low[index]
    out[0] ^= hi
    out[1] ^= lo


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
    secrets = _combine(lam, values, starts, scale)  # the factor common to a secret's shares applied once
    # the second rebuild: without each secret's first share, where more than t
    again = np.array([i for i, row in enumerate(xs) if len(row) > threshold], dtype=np.int64)
    keep = np.isin(owner, again) & (np.arange(x.size) != starts[owner])
    first = x[starts[again]]
    lam_b = multiply_small(lam[:, keep], x[starts[owner[keep]]] ^ x[keep])
    starts_b = np.searchsorted(owner[keep], again)
    check = _combine(lam_b, values[keep], starts_b, multiply(scale[:, again], inverses[:, first])) if again.size else []
    disagree = [int(i) for i, other in zip(again, check, strict=True) if other != secrets[i]]
    return secrets, disagree


def _combine(lam: np.ndarray, values: np.ndarray, starts: np.ndarray, scale: np.ndarray) -> list[bytes]:
    """scale_i sum_j lam_j y_j per secret i (its shares contiguous from its start), both halves: 32 bytes each."""
    both = multiply(np.concatenate([lam, lam], axis=1), np.concatenate([values[:, :2].T, values[:, 2:].T], axis=1))
    first, second = both[:, :lam.shape[1]], both[:, lam.shape[1]:]
    sums = np.concatenate([np.bitwise_xor.reduceat(half, starts, axis=1) for half in (first, second)], axis=1)
    words = multiply(sums, np.concatenate([scale, scale], axis=1))  # first halves of all secrets, then second
    count = starts.size
    data = np.ascontiguousarray(np.concatenate([words[:, :count], words[:, count:]]).T).astype(">u8").tobytes()
    return [data[i:i + 32] for i in range(0, len(data), 32)]
