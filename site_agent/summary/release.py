"""What leaves the site in a data summary, decided here under its policy: per feature the count of cases in each cell,
a cell of fewer than `min_count` cases left out; per quantile the value over at least `min_count` cases, else
withheld. With the job's `dp_noise_multiplier` z, every cell of every fixed-cell feature (empty ones too) gets
Gaussian noise of std z * sqrt(K) (K features, each case counted once in each: the counts' L2 sensitivity is
sqrt(K)) before the same suppression, and neither quantiles nor scanner model names (cells the data would name)
leave. The noise is drawn from the operating system's entropy, never from the job's seed, which the server knows.
"""

from __future__ import annotations

import math
import secrets
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fl_contract import data_summary as ds
from fl_contract.job_params import DataSummaryParams
from fl_contract.version import AGENT_VERSION
from site_agent.privacy.accounting import CLIENT_DP_DELTA, summary_spend
from site_agent.summary.observation import Observation


def observe(folder: Path, job: DataSummaryParams) -> list[Observation]:
    """Every case (image) of the site's dataset folder as the summary counts it."""
    if job.data_kind == ds.GLIOMA:
        from site_agent.summary import glioma

        return glioma.observe_site(folder, job)
    from site_agent.summary import isic

    return isic.observe_site(folder, job)


def summarise(observations: Sequence[Observation], job: DataSummaryParams, min_count: int,
              rng: np.random.Generator | None = None) -> dict[str, Any]:
    """The summary that leaves the site (`fl_contract.data_summary.dumps` is its text). `rng` draws the DP noise
    (tests pass a seeded one to measure it; the site never does)."""
    features = ds.features_of(job.data_kind, job.classes)
    z = job.dp_noise_multiplier
    noised = [f for f in features if f.cells is not None] if z > 0 else []
    sigma = z * math.sqrt(len(noised)) if z > 0 else 0.0
    noise = rng if rng is not None else np.random.default_rng(secrets.randbits(128))
    released: dict[str, Any] = {}
    for feature in features:
        counts = Counter(_cell(o, feature) for o in observations)
        if z > 0 and feature.cells is None:
            released[feature.name] = {"withheld": "cells the data would name (scanner models) are not sent under DP"}
            continue
        if z > 0:
            assert feature.cells is not None
            counts = Counter({c: max(0, round(counts.get(c, 0) + noise.normal(0.0, sigma))) for c in feature.cells})
        released[feature.name] = {"cells": {c: int(n) for c, n in sorted(counts.items()) if n >= max(min_count, 1)}}
    summary: dict[str, Any] = {
        "format": ds.FORMAT, "data": job.data_kind, "params": job.content(), "min_count": min_count,
        "site_agent_version": AGENT_VERSION, "features": released,
        "quantiles": _quantiles(observations, job.data_kind, min_count, z > 0),
        "dp": None,
    }
    if z > 0:
        spend = summary_spend(z)
        summary["dp"] = {"noise_multiplier": z, "features": len(noised), "l2_sensitivity": math.sqrt(len(noised)),
                         "sigma": sigma, "epsilon": spend.epsilon, "delta": CLIENT_DP_DELTA}
    return summary


def _cell(seen: Observation, feature: ds.Feature) -> str:
    cell = seen.cells.get(feature.name)
    if cell is None or (feature.cells is not None and cell not in feature.cells):
        raise AssertionError(f"{seen.name}: cell {cell!r} of {feature.name} is not one of its cells")
    return cell


def _quantiles(observations: Sequence[Observation], data: str, min_count: int, dp: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, at in ds.quantile_names(data).items():
        values = [o.values[name] for o in observations if name in o.values]
        if dp:
            out[name] = {"withheld": "quantiles are not sent under DP"}
        elif len(values) < max(min_count, 1):
            out[name] = {"withheld": f"over fewer than min_count ({min_count}) cases"}
        else:
            if np.ndim(values[0]) == 1:  # each case's voxel percentiles: their mean over the cases
                result = np.mean(np.stack([np.asarray(v, dtype=float) for v in values]), axis=0)
            else:  # one value per case: its percentiles over the cases
                result = np.percentile(np.asarray(values, dtype=float), at)
            out[name] = {"at": list(at), "cases": len(values), "values": [ds.rounded(float(v)) for v in result]}
    return out


def problems_text(observations: Sequence[Observation]) -> str:
    """The reader's message for every case a training job would refuse: kept at the site (it names files)."""
    return "".join(f"{o.name}: {o.cells['case_status']}: {o.problem}\n" for o in observations
                   if o.cells.get("case_status") != ds.USABLE)
