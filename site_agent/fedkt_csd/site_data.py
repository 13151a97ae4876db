"""A FedKT-CSD site's images: the ISIC-format folder split by seed into the statistics part and a held-out part.

The held-out part never enters the statistics; the optional evaluation round scores the server's classifier on it.
The split is a pure function of the records and the seed, so the privacy officer's export and the job compute the
same statistics from the same folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from fl_contract.models.dcae import LoadedAutoencoder, to_autoencoder_range
from site_agent.data.isic import IsicRecord, isic_dataset, read_isic_site
from site_agent.data.split import split_records
from site_agent.fedkt_csd.stats import site_statistics

_DECODE_BATCH = 64


@dataclass(frozen=True)
class LabelledImages:
    """(N, 3, S, S) float32 images in [0, 1] and their (N,) int64 class indices."""

    images: torch.Tensor
    labels: torch.Tensor


@dataclass(frozen=True)
class SiteSplit:
    """The site's records by part, each in CSV order; the held-out part is empty when holdout_fraction is 0."""

    statistics: list[IsicRecord]
    holdout: list[IsicRecord]


def read_images(records: Sequence[IsicRecord], image_size: int) -> LabelledImages:
    """The records' images, all in memory (the statistics need them at once), through the ISIC pipeline at
    `image_size` x `image_size`; an image that does not decode raises the `DataError` naming it."""
    if not records:
        return LabelledImages(torch.empty(0, 3, image_size, image_size), torch.empty(0, dtype=torch.int64))
    batches = list(DataLoader(isic_dataset(records, image_size), batch_size=_DECODE_BATCH))
    return LabelledImages(torch.cat([b["image"] for b in batches]), torch.cat([b["label"] for b in batches]))


def load_split(folder: Path, classes: Sequence[str], holdout_fraction: float, seed: int) -> SiteSplit:
    """The site's records of `classes` (refusing unusable rows, naming them) split into statistics and holdout."""
    if not 0.0 <= holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must lie in [0, 1), got {holdout_fraction}")
    fractions = {"statistics": 1.0 - holdout_fraction, "holdout": holdout_fraction}
    return SiteSplit(**split_records(read_isic_site(folder, classes=classes), fractions, seed, folder))


def statistics_vector(autoencoder: LoadedAutoencoder, folder: Path, classes: Sequence[str], image_size: int,
                      holdout_fraction: float, seed: int, encode_batch_size: int | None = None) -> np.ndarray:
    """The site's unmasked fixed-point statistics on Z/2^64: what the job masks and sends, and what the export holds.

    Encoded in batches of one fixed size (the site's `encode_batch_size`, default the device's:
    `stats.default_encode_batch_size`), so the vector does not depend on how many images this site holds: any
    split of the same records over sites sums to the same bits (on the same hardware, software, precision and
    batch size; see docs/fedkt-csd-privacy.md).
    """
    split = load_split(folder, classes, holdout_fraction, seed)
    data = read_images(split.statistics, image_size)
    return site_statistics(autoencoder.model, to_autoencoder_range(data.images), data.labels, len(classes),
                           autoencoder.clip_norm, encode_batch_size)
