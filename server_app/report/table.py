"""Per-method statistics over seeds: median with a bootstrap 95% interval, as a markdown table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from server_app.metrics import SCORES, incentivisation
from server_app.report.runs import Run

BOOTSTRAP_SAMPLES = 2000
LABELS = {"test_macro_f1": "macro-F1", "test_balanced_accuracy": "balanced acc."}


def bootstrap_median(values: Sequence[float], seed: int = 0) -> tuple[float, float, float]:
    """(median, 2.5th, 97.5th percentile of the median over resamples of `values` with replacement)."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("no values to summarise")
    resampled = np.random.default_rng(seed).choice(data, size=(BOOTSTRAP_SAMPLES, data.size), replace=True)
    low, high = np.percentile(np.median(resampled, axis=1), [2.5, 97.5])
    return float(np.median(data)), float(low), float(high)


def run_metrics(run: Run, runs: Sequence[Run]) -> dict[str, float | None]:
    """Federation score and fairness per score, and incentivisation against Local and FedAvg of the same seed."""
    metrics: dict[str, float | None] = {}
    baselines = {r.method: r for r in runs if r.seed == run.seed}
    for score in SCORES:
        metrics[score] = run.summary[score]
        metrics[f"{score}_variance"] = run.summary[f"{score}_variance"]
        if "local" in baselines and "fedavg" in baselines:
            metrics[f"{score}_incentivisation"] = incentivisation(run.site_scores(score), baselines["local"].site_scores(score),
                                                                  baselines["fedavg"].site_scores(score))
        else:
            metrics[f"{score}_incentivisation"] = None
    return metrics


def method_table(runs: Sequence[Run]) -> dict[str, dict[str, Any]]:
    """method -> metric -> (median, low, high) over seeds, or None where a metric cannot be computed; "seeds" -> run count."""
    table: dict[str, dict[str, Any]] = {}
    for method in sorted({r.method for r in runs}):
        per_seed = [run_metrics(r, runs) for r in runs if r.method == method]
        row: dict[str, Any] = {}
        for key in per_seed[0]:
            values = [v for m in per_seed if (v := m[key]) is not None]
            row[key] = None if len(values) < len(per_seed) else bootstrap_median(values)
        row["seeds"] = len(per_seed)
        table[method] = row
    return table


def _cell(value: tuple[float, float, float] | None) -> str:
    return "n/a" if value is None else f"{value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}]"


def markdown(table: dict[str, dict[str, Any]]) -> str:
    columns = [(f"{s}", f"{LABELS[s]}") for s in SCORES] + [(f"{s}_variance", f"fairness: var {LABELS[s]}") for s in SCORES] \
        + [(f"{s}_incentivisation", f"incentivisation ({LABELS[s]})") for s in SCORES]
    lines = ["| method | seeds | " + " | ".join(label for _, label in columns) + " |",
             "| --- | --- | " + " | ".join("---" for _ in columns) + " |"]
    for method, row in table.items():
        lines.append(f"| {method} | {row['seeds']} | " + " | ".join(_cell(row[key]) for key, _ in columns) + " |")
    return "\n".join(lines) + "\n"
