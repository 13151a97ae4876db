"""A site's ISIC images for PLayer-FL: the four-class records, split 64/16/20 by seed, read lazily at a fixed size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from site_agent.data.isic import PLAYERFL_CLASSES, IsicImageReader, IsicRecord, read_isic_site
from site_agent.data.reader import DataError

SPLIT_FRACTIONS = (0.64, 0.16, 0.20)


@dataclass(frozen=True)
class SiteSplits:
    train: list[IsicRecord]
    val: list[IsicRecord]
    test: list[IsicRecord]


def split_records(records: Sequence[IsicRecord], seed: int, source: Path) -> SiteSplits:
    """Random 64/16/20 train/validation/test split, the same for the same records and seed."""
    n = len(records)
    n_val, n_test = round(SPLIT_FRACTIONS[1] * n), round(SPLIT_FRACTIONS[2] * n)
    if min(n - n_val - n_test, n_val, n_test) < 1:
        raise DataError(f"{source}: {n} usable images cannot be split 64/16/20 into non-empty parts; the site needs at least 5")
    order = np.random.default_rng(seed).permutation(n)
    pick = lambda idx: [records[i] for i in idx]  # noqa: E731
    return SiteSplits(pick(order[n_val + n_test :]), pick(order[:n_val]), pick(order[n_val : n_val + n_test]))


def load_site_splits(folder: Path, seed: int) -> SiteSplits:
    """Read the site's four-class ISIC folder (errors name the file and row) and split it."""
    return split_records(read_isic_site(folder, classes=PLAYERFL_CLASSES), seed, folder)


class IsicImages(Dataset):
    """(image (3, size, size) float32, label) pairs, decoded on access so large sites need not fit in memory."""

    def __init__(self, records: Sequence[IsicRecord], size: int):
        self.records = list(records)
        self.reader = IsicImageReader(size=(size, size))

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        record = self.records[index]
        return torch.from_numpy(self.reader.read(record.path).array), record.label
