"""Segmentation job: the model name and the metric keys sites report and the server selects on."""

from collections.abc import Sequence

from fl_contract.labels import REGIONS

MODEL = "segresnet"
DICE_KEYS = tuple(f"val_dice_{r.lower()}" for r in REGIONS) + ("val_dice_mean",)
SELECTION_METRIC = DICE_KEYS[-1]  # val_dice_mean: the best global model is chosen on it
VAL_CASES = "val_cases"  # how many validation cases the site's Dice values average over
TRAIN_LOSS = "train_loss"
DP_NOISE_STD = "dp_noise_std"
DP_EPSILON = "dp_epsilon"  # the site's client-side DP epsilon so far in the job (site_agent.accounting, its delta)


def min_roi_divisor(blocks_down: Sequence[int]) -> int:
    """ROI sides must be multiples of this: SegResNet halves the volume once per level after the first."""
    if not blocks_down:
        raise ValueError("SegResNet needs at least one encoder level; blocks_down is empty")
    return 1 << (len(blocks_down) - 1)
