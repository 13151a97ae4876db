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

from site_agent.data.isic import IsicImageReader, IsicRecord, read_isic_site
from site_agent.data.reader import DataError
from site_agent.fedkt.stats import site_statistics
from fl_contract.models.dcae import LoadedAutoencoder, to_autoencoder_range


@dataclass(frozen=True)
class LabelledImages:
    """(N, 3, S, S) float32 images in [0, 1] and their (N,) int64 class indices."""

    images: torch.Tensor
    labels: torch.Tensor


@dataclass(frozen=True)
class SiteSplit:
    statistics: list[IsicRecord]
    holdout: list[IsicRecord]


def split_holdout(records: Sequence[IsicRecord], holdout_fraction: float, seed: int, source: Path) -> SiteSplit:
    """A seeded random `holdout_fraction` of the records is held out; the rest feeds the statistics."""
    if not 0.0 <= holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must lie in [0, 1), got {holdout_fraction}")
    n_holdout = round(holdout_fraction * len(records))
    if len(records) - n_holdout < 1:
        raise DataError(f"{source}: {len(records)} usable images leave none for the statistics after holding out "
                        f"{n_holdout}; add images or lower holdout_fraction")
    order = np.random.default_rng(seed).permutation(len(records))
    return SiteSplit([records[i] for i in sorted(order[n_holdout:])], [records[i] for i in sorted(order[:n_holdout])])


def read_images(records: Sequence[IsicRecord], image_size: int) -> LabelledImages:
    """Decode the records' images at `image_size` x `image_size` (errors name the file)."""
    reader = IsicImageReader(size=(image_size, image_size))
    images = [torch.from_numpy(reader.read(record.path).array) for record in records]
    stacked = torch.stack(images) if images else torch.empty(0, 3, image_size, image_size)
    return LabelledImages(stacked, torch.tensor([record.label for record in records], dtype=torch.int64))


def load_split(folder: Path, classes: Sequence[str], holdout_fraction: float, seed: int) -> SiteSplit:
    """The site's records of `classes` (refusing unusable rows, naming them) split into statistics and holdout."""
    return split_holdout(read_isic_site(folder, classes=classes), holdout_fraction, seed, folder)


def statistics_vector(autoencoder: LoadedAutoencoder, folder: Path, classes: Sequence[str], image_size: int,
                      holdout_fraction: float, seed: int, batch_size: int = 32) -> np.ndarray:
    """The site's unmasked fixed-point statistics on Z/2^64: what the job masks and sends, and what the export holds."""
    split = load_split(folder, classes, holdout_fraction, seed)
    data = read_images(split.statistics, image_size)
    return site_statistics(autoencoder.model, to_autoencoder_range(data.images), data.labels, len(classes),
                           autoencoder.clip_norm, batch_size)
