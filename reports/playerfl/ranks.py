"""The paper's comparison over seeds: each method's mean rank in macro-F1, fairness and incentivisation, and
rank-based significance tests (scipy): Friedman across all methods, Wilcoxon signed-rank of PLayer-FL against each
other method, both over the seeds every compared method has.

Ranks are per seed, 1 = best (highest macro-F1, lowest variance of the sites' macro-F1, highest incentivisation),
ties sharing their mean rank. Incentivisation ranks only the methods it applies to (not Local, not FedAvg). With
n seeds the smallest two-sided Wilcoxon p is 2 / 2^n: 0.0625 for 5 seeds, so no single comparison can reach 0.05
below 6 seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from reports.playerfl.runs import Run
from reports.playerfl.table import run_metrics

REFERENCE = "playerfl"
RANKED = (("test_macro_f1", "macro-F1", True), ("test_macro_f1_variance", "fairness", False),
          ("test_macro_f1_incentivisation", "incentivisation", True))
"""(metric, label, higher is better) in the order the report shows them."""


@dataclass(frozen=True)
class Ranking:
    """One metric's mean ranks over `seeds`, Friedman's p across the methods, and Wilcoxon's p of the reference
    against each other method (None where a test cannot be computed)."""

    metric: str
    label: str
    seeds: list[int]
    mean_ranks: dict[str, float]
    friedman_p: float | None
    wilcoxon_p: dict[str, float | None]


def rank_metric(runs: Sequence[Run], metric: str, label: str, higher_is_better: bool) -> Ranking:
    """Methods are ranked within each seed and only on seeds every method has (Friedman over all, Wilcoxon each against
    the reference), so a seed that is hard for every method does not decide the comparison."""
    values: dict[str, dict[int, float]] = {}
    for run in runs:
        value = run_metrics(run, runs)[metric]
        if value is not None:
            values.setdefault(run.method, {})[run.seed] = value
    methods = sorted(values)
    seeds = sorted(set.intersection(*(set(v) for v in values.values()))) if values else []
    if not seeds:
        return Ranking(metric, label, [], {}, None, {})
    matrix = np.array([[values[m][s] for m in methods] for s in seeds])  # seeds x methods
    ranks = stats.rankdata(-matrix if higher_is_better else matrix, axis=1)
    friedman = None
    if len(methods) >= 3 and len(seeds) >= 2 and np.ptp(matrix, axis=1).any():
        pvalue = float(stats.friedmanchisquare(*matrix.T).pvalue)
        friedman = pvalue if np.isfinite(pvalue) else None
    wilcoxon: dict[str, float | None] = {}
    if REFERENCE in methods:
        reference = matrix[:, methods.index(REFERENCE)]
        for index, method in enumerate(methods):
            if method != REFERENCE:
                wilcoxon[method] = _wilcoxon(reference, matrix[:, index])
    return Ranking(metric, label, seeds, dict(zip(methods, ranks.mean(axis=0).tolist())), friedman, wilcoxon)


def _wilcoxon(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sided signed-rank p of a - b; 1.0 when every seed ties, None with fewer than 2 seeds."""
    if len(a) < 2:
        return None
    if not np.any(a - b):
        return 1.0
    return float(stats.wilcoxon(a, b).pvalue)


def rankings(runs: Sequence[Run]) -> list[Ranking]:
    return [rank_metric(runs, metric, label, higher) for metric, label, higher in RANKED]


def _p(value: float | None) -> str:
    return "—" if value is None else "<0.001" if value < 0.001 else f"{value:.3f}"


def markdown(ranked: Sequence[Ranking]) -> str:
    """Mean ranks (one row per method, one column per metric), then the tests' p-values."""
    methods = sorted({m for r in ranked for m in r.mean_ranks})
    lines = ["| method | " + " | ".join(f"mean rank: {r.label}" for r in ranked) + " | "
             + " | ".join(f"Wilcoxon p vs {REFERENCE}: {r.label}" for r in ranked) + " |",
             "| --- |" + " ---: |" * (2 * len(ranked))]
    for method in methods:
        ranks = [f"{r.mean_ranks[method]:.2f}" if method in r.mean_ranks else "—" for r in ranked]
        tests = ["" if method == REFERENCE else _p(r.wilcoxon_p.get(method)) for r in ranked]
        lines.append(f"| {method} | " + " | ".join(ranks + tests) + " |")
    lines.append("| Friedman p (all methods) | " + " | ".join(_p(r.friedman_p) for r in ranked) + " |"
                 + " |" * len(ranked))
    seeds = sorted({tuple(r.seeds) for r in ranked})
    return "\n".join(lines) + f"\n\nRanks over seeds {', '.join(str(list(s)) for s in seeds)}; 1 = best.\n"
