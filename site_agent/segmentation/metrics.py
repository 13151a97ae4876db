"""Scoring a site's cases as the BraTS evaluation does: label maps, legacy and lesion-wise Dice and HD95 per
region, both empty-region conventions for the legacy ones (fl_contract.segmentation), one row per case kept at the
site and per-site means sent.

Dice is MONAI's (`DiceMetric`). HD95 (mm, from the case's voxel spacing) is computed as the BraTS 2023 evaluator
computes it, legacy and per lesion: DeepMind's surface distances (`surface_distance`, the module the evaluator
vendors), where each surface element counts by its area, not each surface voxel once. Empty regions follow the
BraTS rules or MONAI's NaN convention (sent as `*_ignore_empty`). Lesion-wise scores (`lesion_wise`) follow the
BraTS 2023 evaluator's definition on scipy's connected components.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from monai.data import DataLoader, decollate_batch
from monai.data.utils import affine_to_spacing
from monai.metrics import DiceMetric
from scipy import ndimage
from surface_distance import lookup_tables
from torch import nn

from fl_contract.job_params.segmentation import SlidingWindow
from fl_contract.labels import REGIONS, LabelMap
from fl_contract.segmentation import (
    BRATS_LESION_WORST_HD95_MM,
    BRATS_WORST_HD95_MM,
    DICE,
    HD95,
    IGNORE_EMPTY,
    LESION_DICE,
    LESION_DILATION_VOXELS,
    LESION_HD95,
    LESION_MIN_VOLUME_MM3,
    MEAN,
    cases_key,
    metric_key,
)
from site_agent.segmentation.predict import (
    label_map_from_regions,
    region_logits,
    regions_from_label_map,
    regions_from_logits,
)

REFERENCE_VOXELS, PREDICTED_VOXELS = "reference_voxels", "predicted_voxels"
LESIONS_FOUND, LESIONS_MISSED, FALSE_POSITIVE_LESIONS = "lesions_found", "lesions_missed", "false_positive_lesions"
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


@dataclass(frozen=True)
class LesionScore:
    """One region's lesion-wise Dice and HD95 (mm) and its lesion counts (reference lesions above the volume
    threshold found and missed; predicted lesions touching no reference lesion)."""

    dice: float
    hd95: float
    found: int
    missed: int
    false_positives: int


_CONNECTIVITY_26 = np.ones((3, 3, 3), dtype=bool)
_DILATION_18 = ndimage.generate_binary_structure(3, 2)


def _dilate(mask: np.ndarray, voxels: int) -> np.ndarray:
    """`voxels` steps of 18-neighbourhood dilation (scipy's iterations=0 would dilate until nothing changes)."""
    return ndimage.binary_dilation(mask, structure=_DILATION_18, iterations=voxels) if voxels else mask


def hd95_mm(predicted: np.ndarray, reference: np.ndarray, spacing: Sequence[float]) -> float:
    """The 95th-percentile Hausdorff distance in mm between two boolean masks, as the BraTS 2023 evaluator computes
    it with DeepMind's `surface_distance`: the larger of the two directed 95th percentiles of the distances from each
    surface element of one mask to the other's surface, each element weighted by its area (so a thin spur counts by
    its surface, not by its voxels). Infinite if either mask is empty.

    DeepMind's definition on its surface-element areas (`surface_distance.lookup_tables`), computed here with
    current numpy/scipy: the package's own functions fail on an empty mask under numpy 2 (`np.Inf`) and import
    `scipy.ndimage.filters`, which SciPy 2.0 removes. The tests compare both on constructed cases.
    """
    reference, predicted = np.asarray(reference, dtype=bool), np.asarray(predicted, dtype=bool)
    if not reference.any() or not predicted.any():
        return math.inf
    spacing = [float(s) for s in spacing]
    ref_codes, pred_codes = _neighbour_codes(reference, predicted)
    areas = np.asarray(lookup_tables.create_table_neighbour_code_to_surface_area(spacing))
    ref_border, pred_border = (ref_codes != 0) & (ref_codes != 255), (pred_codes != 0) & (pred_codes != 255)
    to_reference = ndimage.distance_transform_edt(~ref_border, sampling=spacing)[pred_border]
    to_prediction = ndimage.distance_transform_edt(~pred_border, sampling=spacing)[ref_border]
    return max(_weighted_percentile(to_prediction, areas[ref_codes[ref_border]], 95.0),
               _weighted_percentile(to_reference, areas[pred_codes[pred_border]], 95.0))


def _neighbour_codes(*masks: np.ndarray) -> list[np.ndarray]:
    """Each mask's 2x2x2 neighbourhood codes at every voxel corner of the masks' joint bounding box (one voxel of
    background added on each side): the codes index DeepMind's surface-element area table."""
    found = np.argwhere(np.logical_or.reduce(masks))
    lo, hi = found.min(axis=0), found.max(axis=0) + 1
    window = tuple(slice(a, b) for a, b in zip(lo, hi))
    kernel = lookup_tables.ENCODE_NEIGHBOURHOOD_3D_KERNEL
    return [ndimage.correlate(np.pad(m[window], ((0, 1),) * 3).astype(np.uint8), kernel, mode="constant", cval=0)
            for m in masks]


def _weighted_percentile(distances: np.ndarray, areas: np.ndarray, percent: float) -> float:
    """The smallest distance below which at least `percent` of the surface area lies."""
    order = np.argsort(distances, kind="stable")
    cumulative = np.cumsum(areas[order]) / np.sum(areas)
    index = min(int(np.searchsorted(cumulative, percent / 100.0)), len(order) - 1)
    return float(distances[order][index])


def _lesion_hd95(predicted: np.ndarray, reference: np.ndarray, spacing: Sequence[float]) -> float:
    value = hd95_mm(predicted, reference, spacing)
    return value if math.isfinite(value) else BRATS_LESION_WORST_HD95_MM


def lesion_wise(predicted: np.ndarray, reference: np.ndarray, spacing: Sequence[float],
                dilation_voxels: int = LESION_DILATION_VOXELS,
                min_volume_mm3: float = LESION_MIN_VOLUME_MM3) -> LesionScore:
    """Lesion-wise Dice and HD95 of one region's boolean masks, as the BraTS 2023 evaluator defines them.

    Lesions are 26-connected components. Reference lesions whose `dilation_voxels` dilations touch are one lesion
    (so satellites of a tumour are not scored as lesions of their own); each is compared with the union of the
    predicted lesions that reach into its dilation (Dice against the undilated lesion, HD95 by `hd95_mm`; a missed
    lesion scores Dice 0 and HD95 374 mm). Reference lesions of at most `min_volume_mm3` are left out; each
    predicted lesion that touches no reference lesion is a false positive scoring 0 and 374 mm. The score is the
    mean over the kept reference lesions and the false positives; with neither it is Dice 1, HD95 0.
    """
    predicted, reference = np.asarray(predicted, dtype=bool), np.asarray(reference, dtype=bool)
    voxel_mm3 = float(np.prod(spacing))
    lesions, n_lesions = ndimage.label(_dilate(reference, dilation_voxels), structure=_CONNECTIVITY_26)
    lesions[~reference] = 0  # each reference voxel takes the id of its dilated group
    components, _ = ndimage.label(predicted, structure=_CONNECTIVITY_26)
    touched: set[int] = set()
    dice, hd95, missed = [], [], 0
    for lesion_id in range(1, n_lesions + 1):
        lesion = lesions == lesion_id
        hits = np.unique(components[_dilate(lesion, dilation_voxels)])
        hits = hits[hits != 0]
        touched.update(hits.tolist())
        if lesion.sum() * voxel_mm3 <= min_volume_mm3:
            continue
        if not hits.size:
            dice.append(0.0)
            hd95.append(BRATS_LESION_WORST_HD95_MM)
            missed += 1
            continue
        matched = np.isin(components, hits)
        dice.append(2.0 * float((lesion & matched).sum()) / float(lesion.sum() + matched.sum()))
        hd95.append(_lesion_hd95(matched, lesion, spacing))
    false_positives = len(set(np.unique(components).tolist()) - touched - {0})
    scored = len(dice) + false_positives
    if not scored:
        return LesionScore(1.0, 0.0, 0, 0, 0)
    return LesionScore(sum(dice) / scored, (sum(hd95) + false_positives * BRATS_LESION_WORST_HD95_MM) / scored,
                       len(dice) - missed, missed, false_positives)


def score_case(case_id: str, predicted: torch.Tensor, reference: torch.Tensor, spacing: Sequence[float]) -> CaseScore:
    """Legacy Dice and HD95 of (3, X, Y, Z) TC/WT/ET masks against the reference's, in both conventions, and the
    lesion-wise ones."""
    y_pred, y = predicted.float()[None].cpu(), reference.float()[None].cpu()
    dice_brats = DiceMetric(include_background=True, reduction="none", ignore_empty=False)(y_pred, y)[0]
    dice_monai = DiceMetric(include_background=True, reduction="none", ignore_empty=True)(y_pred, y)[0]
    values: dict[str, float] = {}
    for i, region in enumerate(REGIONS):
        in_reference, in_prediction = int(y[0, i].sum()), int(y_pred[0, i].sum())
        if in_reference and in_prediction:
            hd_brats = hd_monai = hd95_mm(y_pred[0, i].bool().numpy(), y[0, i].bool().numpy(), spacing)
        else:
            hd_brats = 0.0 if not (in_reference or in_prediction) else BRATS_WORST_HD95_MM
            hd_monai = math.nan
        lesions = lesion_wise(y_pred[0, i].bool().numpy(), y[0, i].bool().numpy(), spacing)
        values |= {column(region, DICE): float(dice_brats[i]), column(region, DICE, True): float(dice_monai[i]),
                   column(region, HD95): hd_brats, column(region, HD95, True): hd_monai,
                   column(region, LESION_DICE): lesions.dice, column(region, LESION_HD95): lesions.hd95,
                   column(region, LESIONS_FOUND): float(lesions.found),
                   column(region, LESIONS_MISSED): float(lesions.missed),
                   column(region, FALSE_POSITIVE_LESIONS): float(lesions.false_positives),
                   column(region, REFERENCE_VOXELS): float(in_reference),
                   column(region, PREDICTED_VOXELS): float(in_prediction)}
    return CaseScore(case_id, values)


def site_summary(scores: Sequence[CaseScore], split: str) -> dict[str, float]:
    """What the site sends about `split`: per-region means in both conventions and lesion-wise, their region means
    (BraTS only), the number of cases and, per region, how many references hold it. The `_ignore_empty` means skip
    NaN cases; a region NaN in every case is left out."""
    if not scores:
        raise ValueError(f"no {split} cases to summarise")
    summary: dict[str, float] = {}
    for metric in (DICE, HD95, LESION_DICE, LESION_HD95):
        per_region = [float(np.mean([s.values[column(r, metric)] for s in scores])) for r in REGIONS]
        summary |= {metric_key(split, metric, r): v for r, v in zip(REGIONS, per_region)}
        summary[metric_key(split, metric, MEAN)] = float(np.mean(per_region))
    for metric in (DICE, HD95):
        for region in REGIONS:
            defined = [v for s in scores if not math.isnan(v := s.values[column(region, metric, True)])]
            if defined:
                summary[metric_key(split, metric, region, ignore_empty=True)] = float(np.mean(defined))
    summary[cases_key(split)] = float(len(scores))
    for region in REGIONS:
        summary[cases_key(split, region)] = float(sum(s.values[column(region, REFERENCE_VOXELS)] > 0 for s in scores))
    return summary


def score_cases(net: nn.Module, loader: DataLoader, window: SlidingWindow, device: torch.device,
                label_map: LabelMap) -> list[CaseScore]:
    """Every case of `loader` ({"case_id", "image", "label" as TC/WT/ET}) scored on its predicted label map."""
    net.eval()
    scores = []
    for batch in loader:
        logits = region_logits(net, batch["image"], window, device)
        for case_logits, item in zip(logits, decollate_batch(batch)):
            labels = label_map_from_regions(regions_from_logits(case_logits), label_map)
            spacing = affine_to_spacing(item["image"].affine, r=3).tolist()
            scores.append(
                score_case(str(item["case_id"]), regions_from_label_map(labels, label_map), item["label"], spacing)
            )
    return scores


def case_columns() -> list[str]:
    """The columns of `CaseScore.values`, in the per-case file's order."""
    metrics = [(DICE, False), (DICE, True), (HD95, False), (HD95, True), (LESION_DICE, False), (LESION_HD95, False),
               (LESIONS_FOUND, False), (LESIONS_MISSED, False), (FALSE_POSITIVE_LESIONS, False),
               (REFERENCE_VOXELS, False), (PREDICTED_VOXELS, False)]
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
