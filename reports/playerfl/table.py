"""Per-method statistics over seeds: the median with its spread (lowest and highest seed), as a markdown table.

With 5 seeds a bootstrap interval of the median is mostly the range of the values anyway; the plain range says
what was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from reports.playerfl.runs import Run
from server_app.metrics import INCENTIVE_BASELINES, SCORES, incentivisation

LABELS = {"test_macro_f1": "macro-F1", "test_balanced_accuracy": "balanced acc."}


def median_spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, lowest, highest) of `values`."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("no values to summarise")
    return float(np.median(data)), float(data.min()), float(data.max())


def run_metrics(run: Run, runs: Sequence[Run]) -> dict[str, float | None]:
    """Federation score and fairness per score, and incentivisation against Local and FedAvg of the same seed
    (None for those two methods, and without both runs)."""
    metrics: dict[str, float | None] = {}
    baselines = {r.method: r for r in runs if r.seed == run.seed}
    for score in SCORES:
        metrics[score] = run.summary[score]
        metrics[f"{score}_variance"] = run.summary[f"{score}_variance"]
        if run.method not in INCENTIVE_BASELINES and all(b in baselines for b in INCENTIVE_BASELINES):
            local, fedavg = (baselines[b].site_scores(score) for b in INCENTIVE_BASELINES)
            metrics[f"{score}_incentivisation"] = incentivisation(run.site_scores(score), local, fedavg)
        else:
            metrics[f"{score}_incentivisation"] = None
    return metrics


def method_table(runs: Sequence[Run]) -> dict[str, dict[str, Any]]:
    """method -> metric -> (median, lowest, highest) over seeds, or None where a metric does not apply; "seeds" ->
    run count."""
    table: dict[str, dict[str, Any]] = {}
    for method in sorted({r.method for r in runs}):
        per_seed = [run_metrics(r, runs) for r in runs if r.method == method]
        row: dict[str, Any] = {}
        for key in per_seed[0]:
            values = [v for m in per_seed if (v := m[key]) is not None]
            row[key] = None if len(values) < len(per_seed) else median_spread(values)
        row["seeds"] = len(per_seed)
        table[method] = row
    return table


def _cell(value: tuple[float, float, float] | None) -> str:
    return "—" if value is None else f"{value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}]"


def markdown(table: dict[str, dict[str, Any]]) -> str:
    columns = ([(f"{s}", f"{LABELS[s]}") for s in SCORES]
               + [(f"{s}_variance", f"fairness: var {LABELS[s]}") for s in SCORES]
               + [(f"{s}_incentivisation", f"incentivisation ({LABELS[s]})") for s in SCORES])
    lines = ["| method | seeds | " + " | ".join(label for _, label in columns) + " |",
             "| --- | --- | " + " | ".join("---" for _ in columns) + " |"]
    for method, row in table.items():
        lines.append(f"| {method} | {row['seeds']} | " + " | ".join(_cell(row[key]) for key, _ in columns) + " |")
    return "\n".join(lines) + "\n"
