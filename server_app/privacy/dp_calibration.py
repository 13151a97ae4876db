"""Gaussian noise for the FedKT-CSD release, calibrated with dp-accounting.

The release answers up to three Gaussian queries (noise std = multiplier * L2 sensitivity): per-class sums of
latents and per-class sums of outer products share one multiplier z, and under add/remove-one adjacency the
per-class counts get their own multiplier z_n. Classes compose in parallel (a record lies in one class).
Gaussian queries with multipliers z_1..z_k compose exactly into one Gaussian mechanism with multiplier
(sum 1 / z_i^2)^(-1/2), so the joint release is (epsilon, delta)-DP exactly when that equals sigma_AG(epsilon,
delta) (analytic Gaussian, Balle & Wang 2018). The counts need little precision (the estimates divide by them) but
cost a full share of the budget at z_n = z; a larger z_n (default 5) leaves more of it to the statistics that
matter: z = sqrt(2 / (1 / sigma_AG^2 - 1 / z_n^2)), 0.7105 instead of 0.8658 at epsilon 10, delta 1e-5.
Methods:

- "analytic": that formula, `dp_accounting.get_sigma_gaussian`; the default.
- "pld": the same target solved numerically with `calibrate_dp_mechanism` and a PLD accountant
  (value_discretization_interval 1e-3): an independent cross-check, slightly conservative.
- "split": the reference code's choice, (epsilon/k, delta/k)-DP per query with one multiplier for all k queries
  (counts included, so the count multiplier does not apply); more noise, and the composed guarantee is tighter
  than the one asked for (at epsilon 10, delta 1e-5, k = 2: z = 0.919, really epsilon 7.27).

Adjacency: "add_remove" (a record is added or removed: sensitivities R, R^2 and 1 for the counts, k = 3) or
"replace_one" (a record's image is replaced: 2R and sqrt(2) R^2; the counts are treated as public, k = 2).
Our multipliers are relative to the sensitivity of the chosen adjacency, so the accountant always sees plain
Gaussian mechanisms of sensitivity 1, which is dp-accounting's ADD_OR_REMOVE_ONE reading of a GaussianDpEvent (its
REPLACE_ONE reading would double the sensitivity a second time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import dp_accounting
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

from fl_contract.fedkt_csd import COUNT_NOISE_MULTIPLIER, Adjacency, Method

PLD_VALUE_DISCRETIZATION = 1e-3


@dataclass(frozen=True)
class NoiseCalibration:
    """Every number the release uses and the manifest records; the count fields are None for public counts."""

    epsilon: float
    delta: float
    clip_norm: float
    adjacency: Adjacency
    method: Method
    num_queries: int
    noise_multiplier: float  # sums and outer products
    count_multiplier: float | None  # counts
    sensitivity_mean: float
    sensitivity_outer: float
    sensitivity_count: float | None
    accounted_epsilon: float  # the PLD accountant's epsilon at `delta` for the joint release

    @property
    def std_mean(self) -> float:
        return self.noise_multiplier * self.sensitivity_mean

    @property
    def std_outer(self) -> float:
        """Noise std on the diagonal entries; off-diagonal entries get std_outer / sqrt(2) (Frobenius form)."""
        return self.noise_multiplier * self.sensitivity_outer

    @property
    def std_count(self) -> float | None:
        if self.count_multiplier is None or self.sensitivity_count is None:
            return None
        return self.count_multiplier * self.sensitivity_count

    @property
    def multipliers(self) -> list[float]:
        """The multiplier of every query of the joint release, in order: sums, outer products, counts if noised."""
        counts = [] if self.count_multiplier is None else [self.count_multiplier]
        return [self.noise_multiplier, self.noise_multiplier, *counts]

    def manifest(self) -> dict[str, Any]:
        return {**asdict(self), "std_mean": self.std_mean, "std_outer": self.std_outer, "std_count": self.std_count,
                "equivalent_multiplier": equivalent_multiplier(self.multipliers),
                "pld_value_discretization": PLD_VALUE_DISCRETIZATION}


def calibrate_noise(epsilon: float, delta: float, clip_norm: float, adjacency: Adjacency = "add_remove",
                    method: Method = "analytic", count_multiplier: float = COUNT_NOISE_MULTIPLIER) -> NoiseCalibration:
    """The multipliers and sensitivities for an (epsilon, delta)-DP joint release of the per-class statistics.

    `count_multiplier` is the counts' own multiplier under add/remove adjacency; it must exceed sigma_AG(epsilon,
    delta), the multiplier a single query would need for the whole budget.
    """
    if not (epsilon > 0 and 0 < delta < 1 and clip_norm > 0):
        raise ValueError(f"need epsilon > 0, 0 < delta < 1, clip norm > 0; got {epsilon}, {delta}, {clip_norm}")
    sensitivities: tuple[float, float, float | None]
    if adjacency == "add_remove":
        sensitivities = (clip_norm, clip_norm**2, 1.0)
    elif adjacency == "replace_one":
        sensitivities = (2.0 * clip_norm, math.sqrt(2.0) * clip_norm**2, None)
    else:
        raise ValueError(f'adjacency must be "add_remove" or "replace_one", got {adjacency!r}')
    k = 3 if sensitivities[2] is not None else 2
    counts = count_multiplier if k == 3 else None
    if method in ("analytic", "pld"):
        whole = dp_accounting.get_sigma_gaussian(epsilon, delta)
        count_share = _count_share(counts, whole, epsilon, delta)
        if method == "analytic":
            multiplier = math.sqrt(2.0 / (whole**-2 - count_share))
        else:
            multiplier = dp_accounting.calibrate_dp_mechanism(
                lambda: PLDAccountant(value_discretization_interval=PLD_VALUE_DISCRETIZATION),
                lambda z: _release_event([z, z] + ([] if counts is None else [counts])), epsilon, delta)
    elif method == "split":
        multiplier = dp_accounting.get_sigma_gaussian(epsilon / k, delta / k)
        counts = multiplier if k == 3 else None
    else:
        raise ValueError(f'method must be "analytic", "pld" or "split", got {method!r}')
    multipliers = [multiplier, multiplier] + ([] if counts is None else [counts])
    return NoiseCalibration(epsilon, delta, clip_norm, adjacency, method, k, multiplier, counts,
                            sensitivity_mean=sensitivities[0], sensitivity_outer=sensitivities[1],
                            sensitivity_count=sensitivities[2], accounted_epsilon=release_epsilon(multipliers, delta))


def equivalent_multiplier(multipliers: Sequence[float]) -> float:
    """The one Gaussian mechanism that these Gaussian queries compose into exactly: (sum 1 / z_i^2)^(-1/2)."""
    return float(sum(z**-2 for z in multipliers) ** -0.5)


def release_epsilon(multipliers: Sequence[float], delta: float) -> float:
    """Epsilon at `delta` of the composition of Gaussian queries with these multipliers, by the PLD accountant."""
    accountant = PLDAccountant(value_discretization_interval=PLD_VALUE_DISCRETIZATION)
    accountant.compose(_release_event(multipliers))
    return float(accountant.get_epsilon(delta))


def composed_epsilon(noise_multiplier: float, num_queries: int, delta: float) -> float:
    """Epsilon at `delta` of `num_queries` Gaussian queries with this multiplier, by the PLD accountant."""
    return release_epsilon([noise_multiplier] * num_queries, delta)


def _release_event(multipliers: Sequence[float]) -> dp_accounting.DpEvent:
    return dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(z) for z in multipliers])


def _count_share(count_multiplier: float | None, whole: float, epsilon: float, delta: float) -> float:
    """1 / z_n^2, the share of the budget the counts take (0 for public counts); refuses a z_n that takes it all."""
    if count_multiplier is None:
        return 0.0
    if not count_multiplier > whole:
        raise ValueError(f"count_noise_multiplier {count_multiplier} leaves nothing for the sums: "
                         f"at epsilon {epsilon}, delta {delta} it must exceed {whole:.4f} "
                         f"(the multiplier of the whole release as one query); choose e.g. {math.ceil(2 * whole)}")
    return float(count_multiplier**-2)
