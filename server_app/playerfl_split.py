"""PLayer-FL's split on the server: how many leading layers to federate, one rule per method.

Threshold rule (PLayer-FL, after round 1). The paper compares the relative sensitivity of consecutive layers with a
threshold t but publishes neither t nor how sites are combined. Ours (docs/algorithms.md#choosing-the-split,
docs/playerfl.md): each site's cumulative curve is normalised (divided by its total, or by its first layer), so
that every site weighs on the shape and none on its scale (raw first-layer values differ by up to four orders of
magnitude between sites); the federation's curve F is the training-size-weighted mean of the normalised curves;
r_l = F_l / F_{l-1}, and p = (first l with r_l > t) - 1 layers federated (1-based l >= 2); the last layer always
stays local, so 1 <= p <= L - 1. The same rule on each site's own curve gives that site's p, recorded beside the
federation's.
Random rule (PLayer-FL-Random, before round 1): p uniform over 1..L-1 without PLayer-FL's p, by the job seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_contract.playerfl.protocol import NORMALISATIONS

THRESHOLD_GRID = (1.1, 1.25, 1.5, 2.0, 3.0, 5.0)

Curve = Sequence[float] | np.ndarray


def normalise_curve(curve: Curve, normalisation: str) -> np.ndarray:
    """A site's cumulative curve divided by its last value ("total") or its first ("first_layer"); a curve whose
    divisor is 0 (no gradient reached those weights) stays 0."""
    f = np.asarray(curve, dtype=np.float64)
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"unknown curve normalisation {normalisation!r}; choose one of {list(NORMALISATIONS)}")
    divisor = f[-1] if normalisation == "total" else f[0]
    normalised: np.ndarray = f / divisor if divisor > 0 else np.zeros_like(f)
    return normalised


def combine_curves(curves: Mapping[str, Curve], num_samples: Mapping[str, int]) -> np.ndarray:
    """Sample-weighted mean of the sites' (normalised) cumulative curves, all of the same length."""
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
    one) and sample counts, the job's threshold, curve normalisation and seed, and PLayer-FL's p for the random
    rule to leave out (0: not known)."""

    layers: list[str]
    site_curves: Mapping[str, Mapping[str, list[float]]]
    num_samples: Mapping[str, int]
    threshold: float
    seed: int
    normalisation: str = "total"
    playerfl_split: int = 0


SplitRule = Callable[[SplitInputs, Callable[[str], None]], dict[str, Any]]
"""(inputs, log) -> the split's record for results.json; its "federated_layers" is p."""


def curve_defect(curve: Curve, normalisation: str) -> str | None:
    """Why a site's curve cannot count towards the federation's (None: it can). Averaged in, an all-zero curve
    (no gradient reached the weights, e.g. a site whose training split holds one class and whose loss saturates)
    pulls the federation's curve towards 0 with the site's weight, and on its own its ratios are all 1, p = L - 1."""
    f = np.asarray(curve, dtype=np.float64)
    if not np.all(np.isfinite(f)):
        return "non-finite sensitivity values"
    if f[-1] <= 0:
        return ("all zero: no gradient reached its weights (e.g. its training split holds one class and the loss "
                "saturates)")
    if normalisation == "first_layer" and f[0] <= 0:
        return "its first layer's sensitivity is 0, so the first_layer normalisation cannot scale its curve"
    return None


def threshold_split(inputs: SplitInputs, log: Callable[[str], None]) -> dict[str, Any]:
    """PLayer-FL: p from the federation's normalised curve, with what a researcher needs to see why (every site's
    curve and own p, the federation's curve and ratios, p over a grid of t). Sites whose curve is degenerate
    (`curve_defect`) are left out of the federation's curve and named with the reason in `excluded_sites`; if
    every site's is, no split can be read from the data: p stays at round 1's L - 1 and the record warns."""
    names = inputs.layers
    raw = {s: c["cumulative"] for s, c in sorted(inputs.site_curves.items())}
    defects = {s: curve_defect(c, inputs.normalisation) for s, c in raw.items()}
    excluded = {s: reason for s, reason in defects.items() if reason is not None}
    usable = {s: c for s, c in raw.items() if s not in excluded}
    for site, reason in excluded.items():
        log(f"PLayer-FL split: {site}'s sensitivity curve is left out of the federation's ({reason})")
    record: dict[str, Any] = {"rule": "threshold", "threshold": inputs.threshold, "normalisation": inputs.normalisation,
                              "layers": names, "excluded_sites": excluded,
                              "site_curves": {s: _finite_or_none(c) for s, c in raw.items()},
                              "site_importance": {s: _finite_or_none(c["importance"])
                                                  for s, c in sorted(inputs.site_curves.items())}}
    if not usable:
        warning = (f"no site sent a usable sensitivity curve ({excluded}): the split cannot be read from the data, "
                   f"so PLayer-FL keeps round 1's {len(names) - 1} federated layers")
        log(f"PLayer-FL split: {warning}")
        return {**record, "federated_layers": len(names) - 1, "warning": warning, "federation_curve": None,
                "ratios": None, "split_over_thresholds": None, "site_splits": {}, "site_normalised_curves": {}}
    normalised = {s: normalise_curve(c, inputs.normalisation) for s, c in usable.items()}
    federation = combine_curves(normalised, inputs.num_samples)
    p = choose_split(federation, inputs.threshold)
    site_splits = {s: choose_split(c, inputs.threshold) for s, c in usable.items()}
    stability = split_over_thresholds(federation, THRESHOLD_GRID)
    log(f"PLayer-FL split: federating the first {p} layers ({names[:p]}), t={inputs.threshold}; sites' own p "
        f"{site_splits}; federation curve ({inputs.normalisation}-normalised) {np.round(federation, 4).tolist()}; "
        f"p over t: {stability}")
    ratios = [float(r) if np.isfinite(r) else None for r in sensitivity_ratios(federation)]
    return {**record, "federated_layers": p, "federation_curve": federation.tolist(), "ratios": ratios,
            "split_over_thresholds": {str(t): v for t, v in stability.items()}, "site_splits": site_splits,
            "site_normalised_curves": {s: c.tolist() for s, c in normalised.items()}}


def _finite_or_none(values: Curve) -> list[float | None]:
    """Values for results.json, which holds no NaN or infinity: those become null."""
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, dtype=np.float64)]


def random_split(inputs: SplitInputs, log: Callable[[str], None]) -> dict[str, Any]:
    """PLayer-FL-Random: p uniform over 1..L-1 (never the full model) without PLayer-FL's p, by the job seed."""
    names = inputs.layers
    if inputs.playerfl_split >= len(names):
        raise ValueError(f"playerfl_split={inputs.playerfl_split}: the model has {len(names)} layers, PLayer-FL "
                         f"federates at most {len(names) - 1}")
    choices = [p for p in range(1, len(names)) if p != inputs.playerfl_split]
    if not choices:
        raise ValueError(f"a {len(names)}-layer model leaves PLayer-FL-Random no split besides PLayer-FL's")
    p = int(np.random.default_rng(inputs.seed).choice(choices))
    log(f"PLayer-FL-Random: federating the first {p} layers ({names[:p]}), drawn from {choices}")
    return {"rule": "random", "layers": names, "federated_layers": p, "choices": choices,
            "playerfl_split": inputs.playerfl_split}


SPLIT_RULES: dict[str, SplitRule] = {"playerfl": threshold_split, "playerfl_random": random_split}
"""The methods whose contract chooses a split, and how the server chooses it."""
