"""BraTS label maps and scores: ET inside TC inside WT, Dice and HD95 per region in both empty-region conventions,
lesion-wise Dice and HD95 as the BraTS 2023 evaluator defines them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fl_contract.labels import BRATS_2021, BRATS_2023
from fl_contract.segmentation import BRATS_LESION_WORST_HD95_MM, BRATS_WORST_HD95_MM, TEST, split_metric_keys
from site_agent.segmentation.metrics import CaseScore, LesionScore, case_columns, lesion_wise, score_case, site_summary
from site_agent.segmentation.predict import label_map_from_regions, regions_from_label_map


def _cube(shape, lo, hi) -> torch.Tensor:
    mask = torch.zeros(shape, dtype=torch.bool)
    mask[lo:hi, lo:hi, lo:hi] = True
    return mask


def _boxes(shape, *corners: tuple[int, int, int], side: int = 4) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    for x, y, z in corners:
        mask[x:x + side, y:y + side, z:z + side] = True
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
        values = dict.fromkeys(case_columns(), 0.5)
        values |= {f"{r}_{v}": 10.0 for r in ("tc", "wt", "et") for v in ("reference_voxels", "predicted_voxels")}
        values |= {"et_dice": 1.0 if np.isnan(dice_et_ie) else dice_et_ie, "et_dice_ignore_empty": dice_et_ie,
                   "tc_hd95_ignore_empty": float("nan"), "et_reference_voxels": et_voxels}
        return CaseScore("c", values)

    sent = site_summary([row(float("nan"), 0.0), row(0.2, 5.0)], TEST)

    assert sent["test_dice_et"] == pytest.approx(0.6) and sent["test_dice_et_ignore_empty"] == pytest.approx(0.2)
    assert "test_hd95_tc_ignore_empty" not in sent  # NaN in every case
    assert sent["test_cases"] == 2 and sent["test_cases_et"] == 1 and sent["test_cases_tc"] == 2
    assert set(sent) <= set(split_metric_keys(TEST))


def test_lesion_wise_scores_a_found_a_missed_and_a_false_positive_lesion_one_third_each():
    shape = (40, 40, 40)
    reference = _boxes(shape, (2, 2, 2), (30, 30, 30))  # two 64 mm3 lesions
    predicted = _boxes(shape, (2, 2, 2), (2, 30, 2))  # the first exactly, and one far from both

    score = lesion_wise(predicted, reference, spacing=(1.0, 1.0, 1.0))

    assert score == LesionScore(dice=pytest.approx(1 / 3), hd95=pytest.approx(2 * BRATS_LESION_WORST_HD95_MM / 3),
                                found=1, missed=1, false_positives=1)


def test_lesion_wise_matches_a_hand_computed_shifted_lesion():
    # reference [2, 6)^3, prediction moved one voxel along x: overlap 3*4*4 = 48 of 64 + 64 voxels, so Dice
    # 96/128 = 0.75. Of each cube's 56 surface voxels, the 16 on the leading face and the 4 inside the trailing face
    # lie 1 mm from the other's surface and the other 36 on it: 20/56 > 5%, so HD95 = 1 mm.
    shape = (12, 12, 12)
    reference = _boxes(shape, (2, 2, 2))
    predicted = _boxes(shape, (3, 2, 2))

    score = lesion_wise(predicted, reference, spacing=(1.0, 1.0, 1.0))

    assert (score.dice, score.hd95, score.found) == (0.75, 1.0, 1)


def test_reference_lesions_within_the_dilation_are_one_lesion():
    shape = (40, 40, 40)
    near = _boxes(shape, (2, 2, 2), (2, 2, 8))  # 2 voxels apart: merged by 3 dilations
    far = _boxes(shape, (2, 2, 2), (2, 2, 20))
    predicted = _boxes(shape, (2, 2, 2))

    merged, separate = (lesion_wise(predicted, reference, (1.0, 1.0, 1.0)) for reference in (near, far))

    assert merged.dice == pytest.approx(2 * 64 / (128 + 64)) and (merged.found, merged.missed) == (1, 0)
    assert separate.dice == pytest.approx(0.5) and (separate.found, separate.missed) == (1, 1)


def test_lesions_at_most_the_volume_threshold_are_left_out_and_their_matches_are_not_false_positives():
    shape = (30, 30, 30)
    small = _boxes(shape, (2, 2, 2), side=3)  # 27 voxels
    predicted = _boxes(shape, (3, 3, 3), side=3)

    at_1mm = lesion_wise(predicted, small, (1.0, 1.0, 1.0))  # 27 mm3 <= 50: nothing to score
    at_2mm = lesion_wise(predicted, small, (1.0, 1.0, 2.0))  # 54 mm3: scored
    nothing = lesion_wise(np.zeros(shape, bool), np.zeros(shape, bool), (1.0, 1.0, 1.0))
    spurious = lesion_wise(predicted, np.zeros(shape, bool), (1.0, 1.0, 1.0))

    assert at_1mm == nothing == LesionScore(1.0, 0.0, 0, 0, 0)
    assert at_2mm.found == 1 and at_2mm.dice == pytest.approx(2 * 8 / 54)
    assert spurious == LesionScore(0.0, BRATS_LESION_WORST_HD95_MM, 0, 0, 1)


def test_case_scores_and_site_summary_carry_the_lesion_wise_values():
    shape = (40, 40, 40)
    reference = torch.from_numpy(_boxes(shape, (2, 2, 2), (30, 30, 30)))
    predicted = torch.from_numpy(_boxes(shape, (2, 2, 2), (2, 30, 2)))
    empty = torch.zeros(shape, dtype=torch.bool)

    values = score_case("c", torch.stack([predicted, predicted, empty]), torch.stack([reference, reference, empty]),
                        (1.0, 1.0, 1.0)).values
    sent = site_summary([CaseScore("c", values)], TEST)

    assert values["tc_lesion_dice"] == pytest.approx(1 / 3) and values["et_lesion_dice"] == 1.0
    assert (values["wt_lesions_found"], values["wt_lesions_missed"], values["wt_false_positive_lesions"]) == (1, 1, 1)
    assert sent["test_lesion_dice_mean"] == pytest.approx((1 / 3 + 1 / 3 + 1) / 3)
    assert sent["test_lesion_hd95_et"] == 0.0
