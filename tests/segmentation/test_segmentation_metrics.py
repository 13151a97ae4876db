"""BraTS label maps and scores: ET inside TC inside WT, Dice and HD95 per region in both empty-region conventions,
lesion-wise Dice and HD95 as the BraTS 2023 evaluator defines them."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from monai.metrics import compute_hausdorff_distance

from fl_contract.labels import BRATS_2021, BRATS_2023
from fl_contract.segmentation import BRATS_LESION_WORST_HD95_MM, BRATS_WORST_HD95_MM, TEST, split_metric_keys
from site_agent.segmentation.metrics import (
    CaseScore,
    LesionScore,
    case_columns,
    hd95_mm,
    lesion_wise,
    score_case,
    site_summary,
)
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


def _evaluator_lesion_wise(predicted: np.ndarray, reference: np.ndarray, spacing: tuple[float, float, float],
                           dilation: int = 3, threshold_mm3: float = 50.0) -> tuple[float, float]:
    """The BraTS 2023 evaluator's lesion-wise Dice and HD95, step by step as its published procedure runs them
    (dilate the reference, label, give each reference voxel its dilated group, compare each group with the union of
    the predicted components inside its dilation, 374 mm for infinite distances and false positives), with DeepMind's
    `surface_distance` module, which the evaluator vendors: the package's own functions, where the agent computes the
    same definition with its own code."""
    import surface_distance  # the test dependency is the reference implementation itself
    from scipy import ndimage

    struct = ndimage.generate_binary_structure(3, 2)
    gt_cc, _ = ndimage.label(reference, structure=np.ones((3, 3, 3)))
    dilated_cc, n_dilated = ndimage.label(ndimage.binary_dilation(reference, struct, iterations=dilation),
                                          structure=np.ones((3, 3, 3)))
    combined = np.where(gt_cc > 0, dilated_cc, 0)
    pred_cc, _ = ndimage.label(predicted, structure=np.ones((3, 3, 3)))
    rows, true_positives = [], []
    for comp in range(1, n_dilated + 1):
        gt_tmp = combined == comp
        hits = np.unique(pred_cc[ndimage.binary_dilation(gt_tmp, struct, iterations=dilation)])
        hits = hits[hits != 0]
        true_positives += hits.tolist()
        pred_tmp = np.isin(pred_cc, hits) & (pred_cc > 0)
        dice = 2 * (gt_tmp & pred_tmp).sum() / (gt_tmp.sum() + pred_tmp.sum())
        if pred_tmp.any():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # its scipy.ndimage.filters import
                distances = surface_distance.compute_surface_distances(gt_tmp, pred_tmp, spacing)
            hd = surface_distance.compute_robust_hausdorff(distances, 95)
        else:  # what the package returns under numpy 1 (under numpy 2 its np.Inf raises)
            hd = np.inf
        rows.append((gt_tmp.sum() * np.prod(spacing), dice, 374.0 if np.isinf(hd) else hd))
    false_positives = len(set(np.unique(pred_cc).tolist()) - set(true_positives) - {0})
    kept = [(d, h) for volume, d, h in rows if volume > threshold_mm3]
    n = len(kept) + false_positives
    if not n:
        return 1.0, 0.0
    return sum(d for d, _ in kept) / n, (sum(h for _, h in kept) + 374.0 * false_positives) / n


def _spur_case() -> tuple[np.ndarray, np.ndarray]:
    """Lesion 1: a box the prediction gets right but for a one-voxel-thin spur 9 voxels long; lesion 2: a box the
    prediction places one slice off; a reference lesion the prediction misses and a predicted one far from all."""
    shape = (48, 40, 24)
    reference, predicted = np.zeros(shape, bool), np.zeros(shape, bool)
    reference[4:12, 4:12, 2:6] = predicted[4:12, 4:12, 2:6] = True
    predicted[12:21, 7, 3] = True  # the spur
    reference[28:34, 26:32, 10:13] = True
    predicted[28:34, 26:32, 11:14] = True
    reference[40:45, 4:9, 15:19] = True  # missed
    predicted[20:24, 30:34, 18:21] = True  # false positive
    return predicted, reference


@pytest.mark.filterwarnings("ignore:monai.metrics.utils get_mask_edges")
def test_hd95_counts_surface_by_area_as_the_evaluator_does_on_spurs_and_anisotropic_spacing():
    # Prepare
    predicted, reference = _spur_case()
    spacing = (1.0, 1.0, 2.5)

    # Execute
    score = lesion_wise(predicted, reference, spacing)

    # Assert: equal to the evaluator's procedure; and the case tells area weighting from counting surface voxels
    dice, hd95 = _evaluator_lesion_wise(predicted, reference, spacing)
    assert score.dice == pytest.approx(dice, abs=1e-9) and score.hd95 == pytest.approx(hd95, abs=0.01)
    assert (score.found, score.missed, score.false_positives) == (2, 1, 1)
    lesion, spur = reference.copy(), predicted.copy()
    lesion[28:, :, :] = spur[20:, :, :] = False  # lesion 1 and its prediction alone
    by_voxels = float(compute_hausdorff_distance(torch.from_numpy(spur)[None, None],
                                                 torch.from_numpy(lesion)[None, None],
                                                 include_background=True, percentile=95, spacing=list(spacing))[0, 0])
    by_area = hd95_mm(spur, lesion, spacing)
    assert abs(by_area - by_voxels) > 1.0


@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (0.9, 1.2, 2.5)])
def test_hd95_of_a_voxel_moved_along_an_axis_is_that_many_spacings(spacing):
    # Prepare: each mask's 8 corner surface elements, equal in area, lie n-1 or n spacings from the other's
    reference, predicted = np.zeros((12, 12, 12), bool), np.zeros((12, 12, 12), bool)
    reference[5, 5, 2] = True
    predicted[5, 5, 6] = True

    # Execute
    moved = hd95_mm(predicted, reference, spacing)
    regions = score_case("c", torch.from_numpy(np.stack([predicted] * 3)), torch.from_numpy(np.stack([reference] * 3)),
                         spacing).values

    # Assert
    assert moved == pytest.approx(4 * spacing[2]) and regions["tc_hd95"] == regions["tc_hd95_ignore_empty"] == moved


def test_empty_regions_score_by_the_evaluators_rules():
    # Prepare
    empty, lesion = np.zeros((20, 20, 20), bool), _boxes((20, 20, 20), (2, 2, 2), side=5)

    # Execute
    both_empty = lesion_wise(empty, empty, (1.0, 1.0, 1.0))
    only_predicted = lesion_wise(lesion, empty, (1.0, 1.0, 1.0))
    only_reference = lesion_wise(empty, lesion, (1.0, 1.0, 1.0))

    # Assert
    assert (both_empty.dice, both_empty.hd95) == _evaluator_lesion_wise(empty, empty, (1.0, 1.0, 1.0)) == (1.0, 0.0)
    assert (only_predicted.dice, only_predicted.hd95) == (0.0, BRATS_LESION_WORST_HD95_MM)
    assert (only_reference.dice, only_reference.hd95) == (0.0, BRATS_LESION_WORST_HD95_MM)
    assert math.isinf(hd95_mm(empty, lesion, (1.0, 1.0, 1.0)))


@pytest.mark.parametrize("seed", range(4))
def test_hd95_equals_deepminds_surface_distance_on_random_shapes(seed):
    # Prepare: irregular masks (opened noise) at random anisotropic spacing
    import surface_distance
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    reference, predicted = (ndimage.binary_opening(rng.random((24, 22, 16)) > 0.6) for _ in range(2))
    spacing = tuple(float(s) for s in rng.uniform(0.5, 3.0, 3))

    # Execute
    ours = hd95_mm(predicted, reference, spacing)

    # Assert
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        distances = surface_distance.compute_surface_distances(reference, predicted, spacing)
    assert ours == pytest.approx(surface_distance.compute_robust_hausdorff(distances, 95), abs=0.01)
