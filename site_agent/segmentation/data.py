"""A site's glioma cases as MONAI pipelines: the seeded train/validation/test split and the BraTS transforms.

Validation cases score every global model (the server selects the best on them); test cases score only the
selected model, once, for the final report, so that report is not biased by the selection.

Training follows MONAI's BraTS recipe: optionally RAS orientation and 1 mm voxels, per-channel z-score
normalisation over brain voxels (cached with the decoded volumes), then a random ROI crop, flips on each axis and
intensity scale/shift jitter. Validation sees whole normalised volumes (inference is sliding-window).

The deterministic transforms run once per case and are cached (in memory, or on disk in the site's workspace: the
site's `data_cache`), so only the random ones run each epoch, in the site's `loader_workers` worker processes; on
a GPU a thread prepares the next batch while the GPU trains on this one (MONAI's `ThreadDataLoader`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from monai.data.dataloader import DataLoader
from monai.data.thread_buffer import ThreadDataLoader
from monai.transforms.croppad.dictionary import RandSpatialCropd, SpatialPadd
from monai.transforms.intensity.dictionary import NormalizeIntensityd, RandScaleIntensityd, RandShiftIntensityd
from monai.transforms.spatial.dictionary import Orientationd, RandFlipd, Spacingd
from monai.transforms.transform import MapTransform

from fl_contract.job_params.segmentation import CaseRecipe
from fl_contract.labels import LABEL_MAPS
from fl_contract.segmentation import TEST, VAL
from fl_contract.version import AGENT_VERSION
from site_agent.data.brats_case import BratsCase, GridPolicy, brats_dataset, discover_cases
from site_agent.data.pipeline import SiteCacheDataset, SitePersistentDataset
from site_agent.data.split import split_records

KEYS = ("image", "label")


@dataclass(frozen=True)
class SiteSplit:
    """The site's cases by part, each in folder order; at least one case in each part asked for."""

    train: list[BratsCase]
    val: list[BratsCase]
    test: list[BratsCase]

    def cases(self, split: str) -> list[BratsCase]:
        if split not in (VAL, TEST):
            raise ValueError(f"split {split!r}: use {VAL!r} or {TEST!r}")
        return self.val if split == VAL else self.test


def ras_1mm() -> list[MapTransform]:
    """Reorient to RAS and resample to 1 mm isotropic voxels (trilinear images, nearest-neighbour labels), as the
    BraTS data and both anchors' pipelines are: for sites whose cases are not BraTS-preprocessed."""
    # labels: the MetaTensor's space
    return [Orientationd(keys=KEYS, axcodes="RAS", labels=None, allow_missing_keys=True),
            Spacingd(keys=KEYS, pixdim=(1.0, 1.0, 1.0), mode=("bilinear", "nearest"), allow_missing_keys=True)]


def normalise() -> NormalizeIntensityd:
    return NormalizeIntensityd(keys="image", nonzero=True, channel_wise=True)


def train_augmentation(roi_size: Sequence[int]) -> list[MapTransform]:
    """ROI crop (padding smaller volumes), flips on each axis, intensity scale and shift: MONAI's BraTS recipe."""
    return [
        SpatialPadd(keys=KEYS, spatial_size=list(roi_size)),
        RandSpatialCropd(keys=KEYS, roi_size=list(roi_size), random_size=False),
        RandFlipd(keys=KEYS, prob=0.5, spatial_axis=0),
        RandFlipd(keys=KEYS, prob=0.5, spatial_axis=1),
        RandFlipd(keys=KEYS, prob=0.5, spatial_axis=2),
        RandScaleIntensityd(keys="image", factors=0.1, prob=1.0),
        RandShiftIntensityd(keys="image", offsets=0.1, prob=1.0),
    ]


@dataclass
class SiteData:
    """The site's cached datasets; built once per job, reused every round."""

    split: SiteSplit
    train: SiteCacheDataset | SitePersistentDataset
    val: SiteCacheDataset | SitePersistentDataset
    test: SiteCacheDataset | SitePersistentDataset

    def train_loader(self, batch_size: int, seed: int, workers: int = 0, prefetch: bool = False) -> DataLoader:
        """Shuffled batches whose order and augmentation depend only on `seed` (and, with `workers` > 0, on the
        worker count: MONAI seeds each worker's transforms from the loader's generator). `prefetch`: prepare the
        next batch in a thread, in pinned memory, while the caller trains on this one (for a GPU)."""
        self.train.transform.set_random_state(seed=seed)
        generator = torch.Generator().manual_seed(seed)
        if prefetch:
            return ThreadDataLoader(self.train, batch_size=batch_size, shuffle=True, num_workers=workers,
                                    generator=generator, pin_memory=torch.cuda.is_available())
        return DataLoader(self.train, batch_size=batch_size, shuffle=True, num_workers=workers, generator=generator)

    def eval_loader(self, split: str) -> DataLoader:
        """Whole normalised volumes of the validation or test cases, in folder order."""
        if not self.split.cases(split):
            raise ValueError(f"this site has no {split} cases: the job's {split}_fraction is 0")
        return DataLoader(self.val if split == VAL else self.test, batch_size=1, shuffle=False, num_workers=0)


def split_cases(folder: Path, recipe: CaseRecipe) -> SiteSplit:
    """The site's cases cut into training, validation and test parts by the recipe's fractions and seed."""
    fractions = {"train": 1.0 - recipe.val_fraction - recipe.test_fraction, "val": recipe.val_fraction,
                 "test": recipe.test_fraction}
    return SiteSplit(**split_records(discover_cases(Path(folder)), fractions, recipe.seed, folder))


def load_site_data(folder: Path, recipe: CaseRecipe, cache_dir: Path | None = None) -> SiteData:
    """Discover, split and (for the recipe's `cache_rate` of the cases, or with `cache_dir` all of them) read and
    validate the site's cases up front; a bad case raises its `DataError`, here or (beyond `cache_rate`) when a loader
    reaches it. The recipe's values were checked with the job's parameters (fl_contract.job_params.segmentation).

    `cache_dir`: keep the decoded, normalised cases on disk there instead of in memory (a sub-folder per agent
    version and transform settings, so a job with other settings never reads another's cache)."""
    split = split_cases(folder, recipe)
    labels, grid = LABEL_MAPS[recipe.label_map], cast(GridPolicy, recipe.grid)
    prepare = [*(ras_1mm() if recipe.resample_ras_1mm else []), normalise()]
    digest = hashlib.sha256(
        repr((AGENT_VERSION, recipe.label_map, recipe.grid, recipe.resample_ras_1mm, list(recipe.roi_size))).encode()
    ).hexdigest()
    if cache_dir is not None:
        Path(cache_dir).mkdir(mode=0o700, parents=True, exist_ok=True)  # decoded patient volumes: the service account's
    train_dir, eval_dir = (
        (None, None) if cache_dir is None else (Path(cache_dir) / digest[:16] / p for p in ("train", "eval"))
    )
    train = brats_dataset(split.train, labels, grid, [*prepare, *train_augmentation(recipe.roi_size)],
                          recipe.cache_rate, train_dir)
    val, test = (brats_dataset(cases, labels, grid, prepare, recipe.cache_rate, eval_dir)
                 for cases in (split.val, split.test))
    return SiteData(split, train, val, test)


def labelled_cases_loader(folder: Path, label_map: str, grid: str, resample_ras_1mm: bool) -> DataLoader:
    """Every labelled case of `folder`, whole and normalised as validation sees them, one at a time and read as the
    loader reaches it (an evaluation scores each case once: nothing to cache); a bad case raises its `DataError`."""
    cases = discover_cases(Path(folder))
    prepare = [*(ras_1mm() if resample_ras_1mm else []), normalise()]
    dataset = brats_dataset(cases, LABEL_MAPS[label_map], cast(GridPolicy, grid), prepare, cache_rate=0.0)
    return DataLoader(dataset, batch_size=1, shuffle=False, num_workers=0)
