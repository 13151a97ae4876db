"""Synthetic ISIC-2019-format demo sites: JPEG lesions with class-dependent colour, shape and texture.

Each class has its own lesion colour, border irregularity and texture, so a classifier can learn it; sites get
label skew from Dirichlet(alpha) draws (small alpha, strong skew; `PARTITIONS` says how) and a site-specific skin
tint. Files follow the official layout and CSV formats, so `read_isic_site` reads them like real data.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

from fl_contract.classes import ISIC_CLASSES, PLAYERFL_CLASSES
from site_agent.data.demo.label_skew import (
    DEFAULT_PARTITION,
    PARTITIONS,
    class_partition_counts,
    site_class_proportions,
)
from site_agent.data.isic import GROUND_TRUTH_CSV, IMAGE_FOLDER, METADATA_COLUMNS, METADATA_CSV

# Per class: lesion RGB, border irregularity (0 round .. 1 ragged), texture frequency (0 = uniform; stripes repeat
# every 16 / frequency pixels across). A DC-AE with compression 32 keeps 2 x 2 latent cells of a 64 px image: BKL's
# former 7 px stripes (frequency 2.2) came back from the demo autoencoder as smooth blobs, so FedKT-CSD's synthetic
# BKL taught a classifier nothing about real BKL (docs/fedkt-csd.md). Its 16 px stripes come back.
_LOOK: dict[str, tuple[tuple[int, int, int], float, float]] = {
    "MEL": ((60, 30, 25), 0.9, 0.5),
    "NV": ((120, 75, 45), 0.05, 0.0),
    "BCC": ((205, 120, 130), 0.3, 1.5),
    "AK": ((180, 90, 70), 0.5, 3.0),
    "BKL": ((150, 110, 70), 0.2, 1.0),
    "DF": ((140, 85, 80), 0.1, 0.8),
    "VASC": ((170, 30, 50), 0.25, 0.0),
    "SCC": ((190, 150, 120), 0.7, 1.1),
}
_SITES_ANATOMY = ("anterior torso", "head/neck", "lower extremity", "upper extremity", "posterior torso", "palms/soles")
_DOWNSAMPLED_EVERY = 7  # like the official set, some images carry the `_downsampled` suffix


def write_isic_site(
    out: Path,
    site_index: int,
    n_sites: int = 3,
    n_images: int = 40,
    classes: Sequence[str] = PLAYERFL_CLASSES,
    alpha: float = 0.5,
    size: int = 64,
    seed: int = 0,
    partition: str = DEFAULT_PARTITION,
) -> Path:
    """Write site `site_index` (1-based) of `n_sites`: images, ground-truth CSV and metadata CSV under `out`; label
    skew by `partition` (`PARTITIONS`)."""
    if not 1 <= site_index <= n_sites:
        raise ValueError(f"site index {site_index} is out of range: the federation has sites 1..{n_sites}")
    unknown = sorted(set(classes) - set(_LOOK))
    if unknown:
        raise ValueError(f"classes {unknown} cannot be generated; choose from {sorted(_LOOK)}")
    if partition not in PARTITIONS:
        raise ValueError(f"partition {partition!r} is not one of {', '.join(PARTITIONS)}")
    rng = np.random.default_rng([seed, site_index])
    if partition == "site":
        proportions = site_class_proportions(n_sites, len(classes), alpha, seed)[site_index - 1]
        labels = rng.choice(len(classes), size=n_images, p=proportions)
    else:
        counts = class_partition_counts(n_sites, len(classes), n_images * n_sites, alpha, seed)[site_index - 1]
        labels = rng.permutation(np.repeat(np.arange(len(classes)), counts))
    tint = rng.uniform(-20, 20, 3)
    out = Path(out)
    (out / IMAGE_FOLDER).mkdir(parents=True, exist_ok=True)
    truth_rows, meta_rows = [], []
    for i, label in enumerate(labels):
        name = f"ISIC_{site_index * 100_000 + i:07d}" + ("_downsampled" if i % _DOWNSAMPLED_EVERY == 3 else "")
        PILImage.fromarray(_lesion(classes[label], size, tint, rng)).save(
            out / IMAGE_FOLDER / f"{name}.jpg", quality=92
        )
        truth_rows.append([name, *("1.0" if c == classes[label] else "0.0" for c in ISIC_CLASSES)])
        meta_rows.append([name, str(5 * int(rng.integers(6, 18))), str(rng.choice(_SITES_ANATOMY)),
                          f"SITE{site_index}_{i:07d}", str(rng.choice(("male", "female")))])
    _write_csv(out / GROUND_TRUTH_CSV, ("image", *ISIC_CLASSES), truth_rows)
    _write_csv(out / METADATA_CSV, METADATA_COLUMNS, meta_rows)
    return out


def _lesion(diagnosis: str, size: int, tint: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    colour, irregularity, frequency = _LOOK[diagnosis]
    y, x = np.mgrid[0:size, 0:size] / size - 0.5
    y, x = y - rng.uniform(-0.08, 0.08), x - rng.uniform(-0.08, 0.08)
    angle, radius = np.arctan2(y, x), np.hypot(x, y)
    phases = rng.uniform(0, 2 * np.pi, 3)
    wobble = sum(np.sin(k * angle + p) for k, p in zip((3, 5, 7), phases))
    border = 0.28 * rng.uniform(0.85, 1.15) * (1 + irregularity * 0.25 * wobble)
    inside = radius < border
    texture = (
        0.5 + 0.5 * np.sin(2 * np.pi * frequency * size / 16 * (x + y) + phases[0]) if frequency
        else np.full_like(x, 0.5)
    )
    skin = np.array([215.0, 170.0, 145.0]) + tint
    lesion = np.asarray(colour, dtype=float) * (0.8 + 0.4 * texture[..., None])
    image = np.where(inside[..., None], lesion, skin) + rng.normal(0, 6, (size, size, 3))
    pixels: np.ndarray = np.clip(image, 0, 255).astype(np.uint8)
    return pixels


def _write_csv(path: Path, header: Sequence[str], rows: list[list[str]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
