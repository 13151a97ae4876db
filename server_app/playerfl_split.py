"""PLayer-FL's split on the server: how many leading layers to federate after round 1, one rule per method.

Threshold rule (PLayer-FL). The paper compares the relative sensitivity of consecutive layers with a threshold t
but publishes neither t nor how sites are combined. Ours (ALGORITHMS.md): the sample-weighted mean F of the
sites' cumulative curves, r_l = F_l / F_{l-1}, and p = (first l with r_l > t) - 1 layers federated (1-based
l >= 2); the last layer always stays local, so p <= L - 1, and p >= 1.
Random rule (PLayer-FL-Random): p uniform in 1..L-1, drawn with the job seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

THRESHOLD_GRID = (1.1, 1.25, 1.5, 2.0, 3.0, 5.0)

Curve = Sequence[float] | np.ndarray


def combine_curves(curves: Mapping[str, Sequence[float]], num_samples: Mapping[str, int]) -> np.ndarray:
    """Sample-weighted mean of the sites' cumulative curves (all of the same length)."""
    if not curves:
        raise ValueError("no sensitivity curves to combine")
    lengths = {site: len(curve) for site, curve in curves.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"sites sent curves of different lengths {lengths}: they do not run the same model")
    sites = sorted(curves)
    weights = np.array([num_samples[s] for s in sites], dtype=np.float64)
    stacked = np.array([curves[s] for s in sites], dtype=np.float64)
    mean: np.ndarray = weights @ stacked / weights.sum()
    return mean


def sensitivity_ratios(curve: Curve) -> np.ndarray:
    """r_l = F_l / F_{l-1} for l = 2..L (index 0 is r_2); a step from F = 0 to F > 0 counts as infinite."""
    f = np.asarray(curve, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = f[1:] / f[:-1]
    ratios[(f[:-1] == 0) & (f[1:] == 0)] = 1.0
    return ratios


def choose_split(curve: Curve, threshold: float) -> int:
    """Number p of leading layers to federate: stop before the first layer whose ratio exceeds `threshold`."""
    if len(curve) < 2:
        raise ValueError(f"a split needs at least 2 layers, the curve has {len(curve)}")
    if threshold <= 1.0:
        raise ValueError(f"threshold t must exceed 1 (cumulative curves never decrease), got {threshold}")
    jumps = np.flatnonzero(sensitivity_ratios(curve) > threshold)
    first_jump = int(jumps[0]) + 2 if jumps.size else len(curve)
    return min(first_jump - 1, len(curve) - 1)


def split_over_thresholds(curve: Curve, thresholds: Sequence[float]) -> dict[float, int]:
    """p for each t: logged with the chosen split so a researcher sees how stable it is."""
    return {float(t): choose_split(curve, t) for t in thresholds}


@dataclass(frozen=True)
class SplitInputs:
    """Everything a split rule may use: the model's layer names, the valid sites' round-1 curves (those that sent
    one) and sample counts, and the job's threshold and seed."""

    layers: list[str]
    site_curves: Mapping[str, Mapping[str, list[float]]]
    num_samples: Mapping[str, int]
    threshold: float
    seed: int


SplitRule = Callable[[SplitInputs, Callable[[str], None]], dict[str, Any]]
"""(inputs, log) -> the split's record for results.json; its "federated_layers" is p."""


def threshold_split(inputs: SplitInputs, log: Callable[[str], None]) -> dict[str, Any]:
    """PLayer-FL: p from the mean curve, with what a researcher needs to see why (curves, ratios, p over t)."""
    names = inputs.layers
    mean = combine_curves({s: c["cumulative"] for s, c in inputs.site_curves.items()}, inputs.num_samples)
    p = choose_split(mean, inputs.threshold)
    stability = split_over_thresholds(mean, THRESHOLD_GRID)
    log(f"PLayer-FL split: federating the first {p} layers ({names[:p]}), t={inputs.threshold}; "
        f"mean curve {np.round(mean, 6).tolist()}; p over t: {stability}")
    ratios = [float(r) if np.isfinite(r) else None for r in sensitivity_ratios(mean)]
    return {"rule": "threshold", "threshold": inputs.threshold, "layers": names, "federated_layers": p,
            "mean_curve": mean.tolist(), "ratios": ratios, "split_over_thresholds": {str(t): v for t, v in stability.items()},
            "site_curves": {s: c["cumulative"] for s, c in inputs.site_curves.items()},
            "site_importance": {s: c["importance"] for s, c in inputs.site_curves.items()}}


def random_split(inputs: SplitInputs, log: Callable[[str], None]) -> dict[str, Any]:
    """PLayer-FL-Random: p uniform in 1..L-1 by the job seed, whatever the sites sent."""
    names = inputs.layers
    p = int(np.random.default_rng(inputs.seed).integers(1, len(names)))
    log(f"PLayer-FL-Random: federating the first {p} layers ({names[:p]})")
    return {"rule": "random", "layers": names, "federated_layers": p}


SPLIT_RULES: dict[str, SplitRule] = {"playerfl": threshold_split, "playerfl_random": random_split}
"""The methods whose contract chooses a split, and how the server chooses it."""
