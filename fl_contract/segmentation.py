"""Segmentation jobs: the model name and every metric key sites report and the server selects on.

Sites score label maps (ET inside TC inside WT) per case and send per-site means only; the per-case rows stay at
the site. Two conventions for a region that is empty in the reference or the prediction are sent side by side:

- BraTS (the unsuffixed keys): Dice 1 when both are empty, 0 when one is; HD95 0 when both are empty,
  `BRATS_WORST_HD95_MM` when one is. Every case counts, so the value is always defined.
- MONAI / NVIDIA FLARE's examples (suffix `_ignore_empty`, MONAI's `ignore_empty=True`): Dice is NaN when the
  reference is empty, HD95 NaN when either is; NaN cases are left out of the mean, and a key whose every case is
  NaN is not sent.

Lesion-wise Dice and HD95 (keys `*_lesion_dice_*`, `*_lesion_hd95_*`; BraTS 2023 onwards, which ranks on them) score
each reference lesion on its own and every predicted lesion that touches none as a false positive; they have one
convention only, the BraTS evaluator's (site_agent.segmentation.metrics.lesion_wise).
"""

from collections.abc import Sequence

from fl_contract.labels import REGIONS

MODEL = "segresnet"
VAL, TEST = "val", "test"
"""Splits a site scores: validation (model selection, every round) and test (the final report, once)."""
DICE, HD95 = "dice", "hd95"
LESION_DICE, LESION_HD95 = "lesion_dice", "lesion_hd95"
"""Lesion-wise Dice and HD95 (mm) per region, the BraTS 2023 evaluator's definition."""
IGNORE_EMPTY = "ignore_empty"
"""Key suffix of the MONAI / FLARE convention (empty reference: NaN, left out of the mean)."""
MEAN = "mean"
BRATS_WORST_HD95_MM = 373.13
"""HD95 the BraTS evaluation gives a region present in only one of reference and prediction: the diagonal of the
240 x 240 x 155 mm BraTS volume, sqrt(240^2 + 240^2 + 155^2)."""
BRATS_LESION_WORST_HD95_MM = 374.0
"""HD95 the BraTS 2023 lesion-wise evaluator gives a missed or false-positive lesion (and any infinite distance)."""
LESION_DILATION_VOXELS = 3
"""Reference lesions whose dilations by this many voxels (18-neighbourhood steps) touch count as one lesion, and a
predicted lesion inside a reference lesion's dilation matches it: BraTS 2023's value for gliomas (BraTS-GLI)."""
LESION_MIN_VOLUME_MM3 = 50.0
"""Reference lesions of at most this volume are left out of the lesion-wise means (BraTS-GLI 2023's threshold);
predicted lesions that touch them are not false positives."""


def metric_key(split: str, metric: str, region: str, ignore_empty: bool = False) -> str:
    """e.g. `val_dice_tc`, `test_hd95_mean`, `val_dice_et_ignore_empty`; `region` is TC/WT/ET or `mean`."""
    return f"{split}_{metric}_{region.lower()}" + (f"_{IGNORE_EMPTY}" if ignore_empty else "")


def cases_key(split: str, region: str | None = None) -> str:
    """`val_cases` (cases scored) or `val_cases_tc` (cases whose reference holds the region)."""
    return f"{split}_cases" + (f"_{region.lower()}" if region else "")


def split_metric_keys(split: str) -> tuple[str, ...]:
    """Every key a site may send about one split (the `_ignore_empty` ones only when some case defines them)."""
    keys = [metric_key(split, m, r) for m in (DICE, HD95, LESION_DICE, LESION_HD95) for r in (*REGIONS, MEAN)]
    keys += [metric_key(split, m, r, ignore_empty=True) for m in (DICE, HD95) for r in REGIONS]
    return (*keys, cases_key(split), *(cases_key(split, r) for r in REGIONS))


DICE_KEYS = tuple(metric_key(VAL, DICE, r) for r in (*REGIONS, MEAN))
# val_dice_mean (BraTS convention): the best global model is chosen on it
SELECTION_METRIC = metric_key(VAL, DICE, MEAN)
VAL_CASES = cases_key(VAL)  # how many validation cases the site's values average over: its weight in selection
TEST_CASES = cases_key(TEST)
TEST_METRIC = metric_key(TEST, DICE, MEAN)  # test_dice_mean: the federation's final report on the selected model
TRAIN_LOSS = "train_loss"
DP_NOISE_STD = "dp_noise_std"
DP_EPSILON = "dp_epsilon"  # the site's client-side DP epsilon so far in the job (site_agent.privacy.accounting)


def min_roi_divisor(blocks_down: Sequence[int]) -> int:
    """ROI sides must be multiples of this: SegResNet halves the volume once per level after the first."""
    if not blocks_down:
        raise ValueError("SegResNet needs at least one encoder level; blocks_down is empty")
    return 1 << (len(blocks_down) - 1)


INFERENCE_TASK = "infer"
CASES_SEGMENTED = "cases_segmented"
DICOM_SEGS_WRITTEN = "dicom_segs_written"
SECONDS_TOTAL = "seconds_total"
SECONDS_PER_CASE_MEAN = "seconds_per_case_mean"
SECONDS_PER_CASE_MAX = "seconds_per_case_max"
INFERENCE_KEYS = (CASES_SEGMENTED, DICOM_SEGS_WRITTEN, SECONDS_TOTAL, SECONDS_PER_CASE_MEAN, SECONDS_PER_CASE_MAX)
"""Everything an inference site sends: counts and timings, no image, label, path or case identifier."""


QUARTILES = ("q1", "median", "q3")
"""The distribution an evaluation site sends per metric and region besides the mean, over at least its policy's
`min_cases` cases (each quartile of fewer is too close to one patient's value)."""
CASE_ROWS = "case_rows"
"""FLModel meta of an evaluation answer: one pseudonymised row per case ({"case": "case-007", column: value}), only
where the job asks, the site's policy allows and the site scored at least `min_cases` cases."""


def quartile_key(split: str, metric: str, region: str, quartile: str) -> str:
    """e.g. `eval_dice_tc_median`, `eval_lesion_hd95_mean_q1` (the quartile of the cases' region means)."""
    return f"{metric_key(split, metric, region)}_{quartile}"


LOCAL_MODEL_TASK = "local_model"
"""Cross-site evaluation's first step: each site's final local model (trained in the last round), where it may leave."""
CROSS_VALIDATE_TASK = "cross_validate"
"""Cross-site evaluation's second step: one model (meta `MODEL_NAME`) scored on the site's held-out cases."""
LOCAL_MODEL_SENT = "local_model_sent"
"""The `local_model` answer's one metric: 1 with the model, 0 when the site kept it (its reason in `meta.withheld`)."""
MODEL_NAME = "model"
