"""Scoring a site's cases as the BraTS evaluation does: label maps, Dice and HD95 per region, both empty-region
conventions (fl_contract.segmentation), one row per case kept at the site and per-site means sent.

Dice and HD95 are MONAI's (`DiceMetric`, `HausdorffDistanceMetric(percentile=95)`, distances in mm from the
case's voxel spacing). MONAI gives NaN for empty regions (its convention, sent as `*_ignore_empty`); the BraTS
values replace those NaNs by the challenge's rules. Lesion-wise scores (BraTS 2023+) are not computed: the
official evaluator (`brats-evaluation` on `panoptica`) needs numpy < 2.3, and MONAI has no lesion-wise metric.
"""

from __future__ import annotations

import csv
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from monai.data import DataLoader, decollate_batch
from monai.data.utils import affine_to_spacing
from monai.metrics import DiceMetric, HausdorffDistanceMetric
from torch import nn

from fl_contract.labels import REGIONS, LabelMap
from fl_contract.segmentation import (
    BRATS_WORST_HD95_MM,
    DICE,
    HD95,
    IGNORE_EMPTY,
    MEAN,
    cases_key,
    metric_key,
)
from site_agent.segmentation.predict import label_map_from_regions, region_logits, regions_from_label_map, regions_from_logits

REFERENCE_VOXELS, PREDICTED_VOXELS = "reference_voxels", "predicted_voxels"
CASE_RESULTS_FILE = "case_results.csv"
"""One row per case, split and model round, in `<site workspace>/segmentation/<job id>/`: never sent."""
ROW_KEYS = ("model_round", "task", "split", "case_id")


@dataclass(frozen=True)
class CaseScore:
    """One case's values by column name (`tc_dice`, `tc_dice_ignore_empty`, `tc_hd95`, ..., `tc_reference_voxels`)."""

    case_id: str
    values: Mapping[str, float]


def column(region: str, metric: str, ignore_empty: bool = False) -> str:
    return f"{region.lower()}_{metric}" + (f"_{IGNORE_EMPTY}" if ignore_empty else "")


def score_case(case_id: str, predicted: torch.Tensor, reference: torch.Tensor, spacing: Sequence[float]) -> CaseScore:
    """Dice and HD95 of (3, X, Y, Z) TC/WT/ET masks against the reference's, in both conventions."""
    y_pred, y = predicted.float()[None].cpu(), reference.float()[None].cpu()
    dice_brats = DiceMetric(include_background=True, reduction="none", ignore_empty=False)(y_pred, y)[0]
    dice_monai = DiceMetric(include_background=True, reduction="none", ignore_empty=True)(y_pred, y)[0]
    with warnings.catch_warnings():  # MONAI warns on every empty region; the conventions below say what counts
        warnings.simplefilter("ignore")
        hd95 = HausdorffDistanceMetric(include_background=True, percentile=95, reduction="none")(
            y_pred, y, spacing=[float(s) for s in spacing])[0]
    values: dict[str, float] = {}
    for i, region in enumerate(REGIONS):
        in_reference, in_prediction = int(y[0, i].sum()), int(y_pred[0, i].sum())
        hd_monai = float(hd95[i])
        if in_reference and in_prediction:
            hd_brats = hd_monai
        else:
            hd_brats = 0.0 if not (in_reference or in_prediction) else BRATS_WORST_HD95_MM
        values |= {column(region, DICE): float(dice_brats[i]), column(region, DICE, True): float(dice_monai[i]),
                   column(region, HD95): hd_brats, column(region, HD95, True): hd_monai,
                   column(region, REFERENCE_VOXELS): float(in_reference),
                   column(region, PREDICTED_VOXELS): float(in_prediction)}
    return CaseScore(case_id, values)


def site_summary(scores: Sequence[CaseScore], split: str) -> dict[str, float]:
    """What the site sends about `split`: per-region means in both conventions, their region means (BraTS only),
    the number of cases and, per region, how many references hold it. The `_ignore_empty` means skip NaN cases;
    a region NaN in every case is left out."""
    if not scores:
        raise ValueError(f"no {split} cases to summarise")
    summary: dict[str, float] = {}
    for metric in (DICE, HD95):
        per_region = [float(np.mean([s.values[column(r, metric)] for s in scores])) for r in REGIONS]
        summary |= {metric_key(split, metric, r): v for r, v in zip(REGIONS, per_region)}
        summary[metric_key(split, metric, MEAN)] = float(np.mean(per_region))
        for region in REGIONS:
            defined = [v for s in scores if not math.isnan(v := s.values[column(region, metric, True)])]
            if defined:
                summary[metric_key(split, metric, region, ignore_empty=True)] = float(np.mean(defined))
    summary[cases_key(split)] = float(len(scores))
    for region in REGIONS:
        summary[cases_key(split, region)] = float(sum(s.values[column(region, REFERENCE_VOXELS)] > 0 for s in scores))
    return summary


def score_cases(net: nn.Module, loader: DataLoader, roi_size: Sequence[int], device: torch.device, label_map: LabelMap,
                sw_batch_size: int = 1, overlap: float = 0.5) -> list[CaseScore]:
    """Every case of `loader` ({"case_id", "image", "label" as TC/WT/ET}) scored on its predicted label map."""
    net.eval()
    scores = []
    for batch in loader:
        logits = region_logits(net, batch["image"], list(roi_size), device, sw_batch_size, overlap)
        for case_logits, item in zip(logits, decollate_batch(batch)):
            labels = label_map_from_regions(regions_from_logits(case_logits), label_map)
            spacing = affine_to_spacing(item["image"].affine, r=3).tolist()
            scores.append(score_case(str(item["case_id"]), regions_from_label_map(labels, label_map), item["label"], spacing))
    return scores


def case_columns() -> list[str]:
    """The columns of `CaseScore.values`, in the per-case file's order."""
    metrics = [(DICE, False), (DICE, True), (HD95, False), (HD95, True), (REFERENCE_VOXELS, False),
               (PREDICTED_VOXELS, False)]
    return [column(r, m, ie) for r in REGIONS for m, ie in metrics]


def case_results_path(workspace_dir: Path, job_id: str) -> Path:
    return Path(workspace_dir) / "segmentation" / job_id / CASE_RESULTS_FILE


def append_case_results(path: Path, scores: Sequence[CaseScore], model_round: int, task: str, split: str) -> Path:
    """Add one row per case to the site's per-case CSV (created 0600 in a 0700 folder: rows name cases)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    new = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=[*ROW_KEYS, *case_columns()])
        if new:
            writer.writeheader()
        for score in scores:
            writer.writerow({"model_round": model_round, "task": task, "split": split, "case_id": score.case_id,
                             **score.values})
    return path
