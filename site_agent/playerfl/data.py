"""A PLayer-FL site's ISIC images: the four-class records split 64/16/20 by seed, read through the ISIC pipeline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from fl_contract.classes import PLAYERFL_CLASSES
from site_agent.data.isic import IsicRecord, isic_transforms, read_isic_site
from site_agent.data.pipeline import SiteDataset
from site_agent.data.split import split_records

SPLIT_FRACTIONS = {"train": 0.64, "val": 0.16, "test": 0.20}


@dataclass(frozen=True)
class SiteSplits:
    """The site's records by part, each in CSV order."""

    train: list[IsicRecord]
    val: list[IsicRecord]
    test: list[IsicRecord]


def load_site_splits(folder: Path, seed: int) -> SiteSplits:
    """Read the site's four-class ISIC folder (errors name the file and row) and split it."""
    return SiteSplits(**split_records(read_isic_site(folder, classes=PLAYERFL_CLASSES), SPLIT_FRACTIONS, seed, folder))


def image_label_pair(item: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
    """The pipeline's last step here: PLayer-FL's training loops and sensitivity pass take (images, labels) batches."""
    return item["image"], item["label"]


class IsicImages(SiteDataset):
    """(image (3, S, S) float32 in [0, 1], label int64) pairs, decoded on access so large sites need not fit in memory."""

    def __init__(self, records: Sequence[IsicRecord], image_size: int) -> None:
        super().__init__([record.record() for record in records], isic_transforms(image_size, extra=[image_label_pair]))
