"""How a federation is scored from its sites' held-out results (PLayer-FL: docs/algorithms.md#metrics).

Federation score: per-site scores weighted by training-set size. Fairness: population variance of the per-site
scores (lower is fairer). Incentivisation: share of sites strictly better than both their Local and their FedAvg
result (needs those runs, so the report computes it across runs).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

SCORES = ("test_macro_f1", "test_balanced_accuracy")
WEIGHT = "num_train"
INCENTIVE_BASELINES = ("local", "fedavg")
"""The methods incentivisation compares against: it says nothing about them (FedAvg can never beat itself)."""


def federation_summary(per_site: Mapping[str, Mapping[str, float]], weighted: bool = True) -> dict[str, float]:
    """`<score>` (training-size weighted mean; the plain mean over sites when not `weighted`, as with
    secure_aggregation, where the server never learns a site's size) and `<score>_variance` for each score in
    SCORES."""
    if not per_site:
        raise ValueError("no site results to summarise")
    sites = sorted(per_site)
    needed = (*SCORES, WEIGHT) if weighted else SCORES
    missing = [f"{s}: {k}" for s in sites for k in needed if k not in per_site[s]]
    if missing:
        raise ValueError(f"site results lack {missing}")
    weights = np.array([per_site[s][WEIGHT] if weighted else 1.0 for s in sites], dtype=np.float64)
    summary = {}
    for key in SCORES:
        values = np.array([per_site[s][key] for s in sites], dtype=np.float64)
        summary[key] = float(weights @ values / weights.sum())
        summary[f"{key}_variance"] = float(values.var())
    return summary


def incentivisation(method: Mapping[str, float], local: Mapping[str, float], fedavg: Mapping[str, float]) -> float:
    """Share of the method's sites whose score is strictly above both their Local and their FedAvg score."""
    sites = sorted(method)
    absent = [s for s in sites if s not in local or s not in fedavg]
    if absent:
        raise ValueError(f"sites {absent} lack a Local or FedAvg result for the same seed")
    return float(np.mean([method[s] > local[s] and method[s] > fedavg[s] for s in sites]))
