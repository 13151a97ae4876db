"""What an evaluation site sends about a model's scores on its cases, under its policy's `min_cases` and
`share_case_metrics`.

The means and the case count always leave (as a training job's validation sends them). Quartiles leave only over
at least `min_cases` cases: a quartile of two or three cases is one patient's value. Per-case rows leave only
where the job asks for them, the site's policy shares them and there are at least `min_cases` cases (a value
undefined in MONAI's convention is null); each row is
named by a pseudonym drawn fresh for the job (`case-001`, ... in a random order), whose key to the site's case
folders stays in the site's workspace. Whatever is withheld is named with the reason, so the study lead reads why
a site's row is short.
"""

from __future__ import annotations

import csv
import math
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fl_contract.evaluation import EVAL, WITHHELD
from fl_contract.labels import REGIONS
from fl_contract.segmentation import CASE_ROWS, DICE, HD95, LESION_DICE, LESION_HD95, MEAN, QUARTILES, quartile_key
from site_agent.segmentation.metrics import CaseScore, case_columns, column, site_summary

QUARTILE_METRICS = (DICE, HD95, LESION_DICE, LESION_HD95)
"""The metrics whose distribution is sent (BraTS's convention, defined for every case)."""
PSEUDONYMS_FILE = "case_pseudonyms.csv"
"""Beside the site's per-case file: which case each row it sent is (never sent)."""


@dataclass(frozen=True)
class EvaluationRelease:
    """The scalar metrics, the FLModel meta (rows, what was withheld) and the pseudonyms' key kept at the site."""

    metrics: dict[str, float]
    meta: dict[str, Any] = field(default_factory=dict)
    pseudonyms: dict[str, str] = field(default_factory=dict)


def quartiles(scores: Sequence[CaseScore], split: str = EVAL) -> dict[str, float]:
    """First quartile, median and third quartile per metric and region, and of each case's mean over the regions
    (numpy's linear interpolation)."""
    values: dict[str, float] = {}
    for metric in QUARTILE_METRICS:
        per_case = np.array([[s.values[column(r, metric)] for r in REGIONS] for s in scores], dtype=float)
        for index, region in enumerate((*REGIONS, MEAN)):
            series = per_case.mean(axis=1) if region == MEAN else per_case[:, index]
            for name, q in zip(QUARTILES, np.percentile(series, [25.0, 50.0, 75.0])):
                values[quartile_key(split, metric, region, name)] = float(q)
    return values


def evaluation_release(scores: Sequence[CaseScore], min_cases: int, rows_asked: bool,
                       rows_shared: bool) -> EvaluationRelease:
    """What leaves the site: means always; quartiles and (asked and shared) rows over at least `min_cases` cases."""
    metrics = site_summary(scores, EVAL)
    withheld: dict[str, str] = {}
    enough = len(scores) >= min_cases
    if enough:
        metrics |= quartiles(scores)
    else:
        withheld["quartiles"] = (f"the site scored {len(scores)} cases, fewer than its policy's min_cases={min_cases}: "
                                 "only means and counts leave")
    meta: dict[str, Any] = {}
    pseudonyms: dict[str, str] = {}
    if rows_asked and not rows_shared:
        withheld[CASE_ROWS] = "the site's policy keeps per-case scores (share_case_metrics is false)"
    elif rows_asked and not enough:
        withheld[CASE_ROWS] = (f"the site scored {len(scores)} cases, fewer than its policy's min_cases={min_cases}: "
                               "no per-case row leaves")
    elif rows_asked:
        order = list(range(len(scores)))
        secrets.SystemRandom().shuffle(order)  # OS entropy: the row order says nothing of the folder order
        width = max(3, len(str(len(scores))))
        rows = []
        for number, index in enumerate(order, start=1):
            name = f"case-{number:0{width}d}"
            pseudonyms[name] = scores[index].case_id
            values = scores[index].values
            rows.append({"case": name, **{c: None if math.isnan(values[c]) else values[c] for c in case_columns()}})
        meta[CASE_ROWS] = sorted(rows, key=lambda row: str(row["case"]))
    if withheld:
        meta[WITHHELD] = withheld
    return EvaluationRelease(metrics, meta, pseudonyms)


def write_pseudonyms(path: Path, pseudonyms: dict[str, str]) -> None:
    """The key of the rows sent (0600 in a 0700 folder: it names the site's cases)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["pseudonym", "case_id"])
        writer.writerows(sorted(pseudonyms.items()))
