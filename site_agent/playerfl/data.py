"""A PLayer-FL site's ISIC images: the four-class records split 64/16/20 by seed, read through the ISIC pipeline,
augmented for training and normalised as the paper's ISIC setup does (FLamby's Fed-ISIC2019 pipeline)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from monai.data.meta_obj import get_track_meta, set_track_meta
from monai.transforms.intensity.dictionary import NormalizeIntensityd, RandAdjustContrastd, RandScaleIntensityd
from monai.transforms.spatial.dictionary import RandAffined, RandFlipd
from torch import Tensor

from fl_contract.classes import PLAYERFL_CLASSES
from site_agent.data.isic import IsicRecord, isic_transforms, read_isic_site
from site_agent.data.pipeline import SiteDataset
from site_agent.data.split import split_records

SPLIT_FRACTIONS = {"train": 0.64, "val": 0.16, "test": 0.20}
CHANNEL_MEAN = (0.485, 0.456, 0.406)
CHANNEL_STD = (0.229, 0.224, 0.225)
"""Per-channel normalisation after scaling to [0, 1]: FLamby's Fed-ISIC2019 (ImageNet statistics), which the
paper's ISIC pipeline uses; fixed constants, so no site statistic is needed or leaked."""


@dataclass(frozen=True)
class SiteSplits:
    """The site's records by part, each in CSV order."""

    train: list[IsicRecord]
    val: list[IsicRecord]
    test: list[IsicRecord]


def load_site_splits(folder: Path, seed: int) -> SiteSplits:
    """Read the site's four-class ISIC folder (errors name the file and row) and split it."""
    return SiteSplits(**split_records(read_isic_site(folder, classes=PLAYERFL_CLASSES), SPLIT_FRACTIONS, seed, folder))


def class_weights(records: Sequence[IsicRecord], num_classes: int = len(PLAYERFL_CLASSES)) -> list[float]:
    """Focal loss alpha per class: inverse class frequency at the site, n / (classes present * n_c), so a balanced
    site weighs every class 1; a class the site has no training image of gets 0 (it never is a target there)."""
    counts = np.bincount([r.label for r in records], minlength=num_classes).astype(np.float64)
    present = int(np.count_nonzero(counts))
    if not present:
        raise ValueError("no training images: the site's training split is empty")
    return [float(counts.sum() / (present * c)) if c else 0.0 for c in counts]


def image_label_pair(item: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
    """The pipeline's last step here: PLayer-FL's training loops and sensitivity pass take (images, labels) batches."""
    return item["image"], item["label"]


def augmentations(image_size: int) -> list[Any]:
    """FLamby's Fed-ISIC2019 training augmentation in MONAI's 2D dictionary transforms: small rescaling, rotation up
    to 50 degrees and shear, flips, brightness and contrast changes (FLamby's coarse dropout is left out)."""
    return [
        RandAffined("image", spatial_size=(image_size, image_size), prob=1.0, rotate_range=math.radians(50),
                    shear_range=0.1, scale_range=0.07, padding_mode="reflection", cache_grid=True),
        RandFlipd("image", prob=0.5, spatial_axis=0),
        RandFlipd("image", prob=0.5, spatial_axis=1),
        RandScaleIntensityd("image", factors=0.15, prob=0.5),
        RandAdjustContrastd("image", prob=0.5, gamma=(0.8, 1.25)),
    ]


class IsicImages(SiteDataset):
    """(image (3, S, S) float32 normalised per channel, label int64) pairs, decoded on access so large sites need not
    fit in memory; `augment` adds the training augmentation, reseeded by `reseed` so a round repeats exactly."""

    def __init__(self, records: Sequence[IsicRecord], image_size: int, augment: bool = False) -> None:
        extra = [*(augmentations(image_size) if augment else []),
                 NormalizeIntensityd("image", subtrahend=np.array(CHANNEL_MEAN), divisor=np.array(CHANNEL_STD),
                                     channel_wise=True),
                 image_label_pair]
        super().__init__([record.record() for record in records], isic_transforms(image_size, extra=extra))
        self.records = list(records)

    def __getitem__(self, index: Any) -> Any:
        """Without MONAI's metadata tracking, which the pipeline never reads and which costs 4x the augmentation."""
        tracking = get_track_meta()
        set_track_meta(False)
        try:
            return super().__getitem__(index)
        finally:
            set_track_meta(tracking)

    def reseed(self, seed: int) -> None:
        """Restart the augmentation's random stream (items are read in the main process, in loader order)."""
        self.transform.set_random_state(seed=seed)
