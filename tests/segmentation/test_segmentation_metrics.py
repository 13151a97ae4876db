"""BraTS label maps and scores: ET inside TC inside WT, Dice and HD95 per region in both empty-region conventions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fl_contract.labels import BRATS_2021, BRATS_2023
from fl_contract.segmentation import BRATS_WORST_HD95_MM, TEST, split_metric_keys
from site_agent.segmentation.metrics import CaseScore, score_case, site_summary
from site_agent.segmentation.predict import label_map_from_regions, regions_from_label_map


def _cube(shape, lo, hi) -> torch.Tensor:
    mask = torch.zeros(shape, dtype=torch.bool)
    mask[lo:hi, lo:hi, lo:hi] = True
    return mask


def test_label_map_puts_et_inside_tc_inside_wt_even_when_the_channels_disagree():
    shape = (12, 12, 12)
    tc, wt, et = _cube(shape, 3, 7), _cube(shape, 2, 9), _cube(shape, 5, 11)  # ET pokes out of TC and WT
    regions = torch.stack([tc, wt, et])

    labels = label_map_from_regions(regions, BRATS_2021)
    nested = regions_from_label_map(labels, BRATS_2021)

    assert set(labels.unique().tolist()) == {0, 1, 2, 4}
    assert bool((nested[2] <= nested[0]).all()) and bool((nested[0] <= nested[1]).all())  # ET in TC in WT
    assert bool((nested[2] == (et & tc & wt)).all()) and bool((nested[0] == (tc & wt)).all())  # clipped, never grown
    assert bool((nested[1] == wt).all())
    assert label_map_from_regions(regions, BRATS_2023).max() == 3


def test_brats_and_monai_conventions_for_empty_regions():
    shape = (10, 10, 10)
    empty = torch.zeros(shape, dtype=torch.bool)
    lesion = _cube(shape, 2, 6)
    # TC empty in both, WT present in both (shifted), ET only in the prediction
    predicted = torch.stack([empty, _cube(shape, 3, 7), lesion])
    reference = torch.stack([empty, lesion, empty])

    values = score_case("case", predicted, reference, spacing=(1.0, 1.0, 1.0)).values

    assert values["tc_dice"] == 1.0 and values["tc_hd95"] == 0.0
    assert math.isnan(values["tc_dice_ignore_empty"]) and math.isnan(values["tc_hd95_ignore_empty"])
    assert values["et_dice"] == 0.0 and values["et_hd95"] == BRATS_WORST_HD95_MM
    assert math.isnan(values["et_dice_ignore_empty"]) and math.isnan(values["et_hd95_ignore_empty"])
    assert values["wt_dice"] == values["wt_dice_ignore_empty"] == pytest.approx(2 * 27 / (64 + 64))
    assert values["wt_hd95"] == values["wt_hd95_ignore_empty"] > 0
    assert values["wt_reference_voxels"] == 64 and values["et_predicted_voxels"] == 64


def test_hd95_is_in_millimetres_of_the_case_spacing():
    shape = (10, 10, 10)
    reference = torch.stack([_cube(shape, 2, 6)] * 3)
    predicted = torch.roll(reference, shifts=2, dims=3)  # 2 voxels along the third axis

    one_mm = score_case("c", predicted, reference, (1.0, 1.0, 1.0)).values["tc_hd95"]
    three_mm = score_case("c", predicted, reference, (1.0, 1.0, 3.0)).values["tc_hd95"]

    assert one_mm == pytest.approx(2.0) and three_mm == pytest.approx(6.0)


def test_site_summary_averages_cases_and_leaves_regions_nan_everywhere_out_of_the_monai_means():
    def row(dice_et_ie: float, et_voxels: float) -> CaseScore:
        values = {f"{r}_{m}": 0.5 for r in ("tc", "wt", "et") for m in ("dice", "dice_ignore_empty", "hd95", "hd95_ignore_empty")}
        values |= {f"{r}_{v}": 10.0 for r in ("tc", "wt", "et") for v in ("reference_voxels", "predicted_voxels")}
        values |= {"et_dice": 1.0 if np.isnan(dice_et_ie) else dice_et_ie, "et_dice_ignore_empty": dice_et_ie,
                   "tc_hd95_ignore_empty": float("nan"), "et_reference_voxels": et_voxels}
        return CaseScore("c", values)

    sent = site_summary([row(float("nan"), 0.0), row(0.2, 5.0)], TEST)

    assert sent["test_dice_et"] == pytest.approx(0.6) and sent["test_dice_et_ignore_empty"] == pytest.approx(0.2)
    assert "test_hd95_tc_ignore_empty" not in sent  # NaN in every case
    assert sent["test_cases"] == 2 and sent["test_cases_et"] == 1 and sent["test_cases_tc"] == 2
    assert set(sent) <= set(split_metric_keys(TEST))
