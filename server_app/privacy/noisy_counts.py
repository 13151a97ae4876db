"""Unbiased 1/n and 1/n^2 from a DP-noised count that was released only because it reached `min_count`.

The FedKT-CSD release divides its noisy sums by the class count, and under add/remove adjacency that count is
noisy too: x = n + e, e ~ N(0, s^2) with s the count noise std (5 records by default). Dividing by x is biased:
E[1/x] = (1/n)(1 + s^2/n^2 + 3 s^4/n^4 + ...), +7.8% at n = 20, s = 5, and the released classes are further
selected by x >= min_count, which cuts off the small x that would inflate 1/x most (+4.5% given release at n = 20).
The classical ratio correction (1/x)(1 - s^2/x^2) removes the second-order term but not the selection (-4.1% at
n = 20, min_count 10).

`inverse_count_estimator(power, s, min_count)` gives g(x) = x^-k (1 + sum_{j=1..3} a_j (min_count / x)^(2j)),
whose coefficients are the least-squares solution of E[g(x) n^k | x >= min_count] = 1 over class sizes n from
min_count + 2 s to min_count + 400 s (the expectation by quadrature of the truncated Gaussian). Its expectation
tends to n^-k for large n as 1/x does, and near min_count it carries the selection's correction. Below
min_count + 2 s (a class within two count-noise stds of being withheld) no estimator can be unbiased given
release; `residual_bias` states how far this one is, for the manifest and the docs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

TERMS = 3
FIT_RANGE = (2.0, 400.0)  # class sizes min_count + 2 s .. min_count + 400 s
_FIT_POINTS = 80
_NODES = np.linspace(-10.0, 10.0, 2001)  # quadrature nodes in count-noise stds around n
_WEIGHTS = np.exp(-0.5 * _NODES**2)


@dataclass(frozen=True)
class InverseCountEstimator:
    """g(x) = x^-power (1 + sum_j coefficients[j-1] (min_count / x)^(2j)), for released counts x >= min_count."""

    power: int
    std_count: float
    min_count: float
    coefficients: tuple[float, ...]

    def __call__(self, counts: np.ndarray) -> np.ndarray:
        counts = np.asarray(counts, dtype=np.float64)
        if np.any(counts < self.min_count):
            raise ValueError(f"inverse count estimator is defined for released counts >= {self.min_count}; got "
                             f"{counts.min():.2f}")
        return _evaluate(counts, self.power, self.min_count, np.array(self.coefficients))

    def relative_bias(self, count: float) -> float:
        """E[g(x) | x >= min_count] n^power - 1 for a class of `count` records, by quadrature."""
        x, weights = _released_nodes(count, self.std_count, self.min_count)
        value = float(weights @ _evaluate(x, self.power, self.min_count, np.array(self.coefficients)))
        return value * count**self.power - 1.0

    def manifest(self) -> dict[str, object]:
        low, high = (self.min_count + f * self.std_count for f in FIT_RANGE)
        return {"estimator": f"x^-{self.power} (1 + sum_j a_j (min_count / x)^(2j))",
                "coefficients": list(self.coefficients), "fit_range_records": [low, high],
                "relative_bias": {f"{n:g}": self.relative_bias(n) for n in self.bias_points()}}

    def bias_points(self) -> list[float]:
        """Class sizes min_count + (1, 2, 4, 8, 38) std_count (15, 20, 30, 50, 200 at the defaults)."""
        return [self.min_count + f * self.std_count for f in (1, 2, 4, 8, 38)]


@functools.lru_cache(maxsize=64)
def inverse_count_estimator(power: int, std_count: float, min_count: float) -> InverseCountEstimator:
    """The estimator of n^-power from a noisy count x ~ N(n, std_count^2) released because x >= min_count."""
    if not (power in (1, 2) and std_count > 0 and min_count > 0):
        raise ValueError(f"need power 1 or 2, std_count > 0, min_count > 0; got {power}, {std_count}, {min_count}")
    low, high = (min_count + f * std_count for f in FIT_RANGE)
    sizes = np.geomspace(low, high, _FIT_POINTS)
    rows, targets = [], []
    for n in sizes:
        x, weights = _released_nodes(n, std_count, min_count)
        basis = _basis(x, power, min_count)
        rows.append(weights @ basis[:, 1:] * n**power)
        targets.append(1.0 - weights @ basis[:, 0] * n**power)
    coefficients, *_ = np.linalg.lstsq(np.array(rows), np.array(targets), rcond=None)
    return InverseCountEstimator(power, std_count, min_count, tuple(float(a) for a in coefficients))


def _basis(x: np.ndarray, power: int, min_count: float) -> np.ndarray:
    """Columns x^-power (min_count / x)^(2j), j = 0..TERMS."""
    ratio = (min_count / x)[:, None] ** (2 * np.arange(TERMS + 1))
    basis: np.ndarray = x[:, None] ** -power * ratio
    return basis


def _evaluate(x: np.ndarray, power: int, min_count: float, coefficients: np.ndarray) -> np.ndarray:
    flat = x.reshape(-1)
    values: np.ndarray = _basis(flat, power, min_count) @ np.concatenate([[1.0], coefficients])
    return values.reshape(x.shape)


def _released_nodes(count: float, std_count: float, min_count: float) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes of x ~ N(count, std_count^2) given x >= min_count, and their normalised weights."""
    x = count + std_count * _NODES
    kept = x >= min_count
    weights = _WEIGHTS[kept]
    return x[kept], weights / weights.sum()



def inverse_counts(counts: np.ndarray, std_count: float | None,
                   min_count: float) -> tuple[np.ndarray, np.ndarray]:
    """Estimates of (1/n, 1/n^2) per class from its released count: exact for public counts (std_count None)."""
    counts = np.asarray(counts, dtype=np.float64)
    if std_count is None:
        return 1.0 / counts, 1.0 / counts**2
    return (inverse_count_estimator(1, std_count, min_count)(counts),
            inverse_count_estimator(2, std_count, min_count)(counts))
