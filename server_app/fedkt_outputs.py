"""What the admin downloads from a FedKT-CSD job, written into the server app folder.

    dp_statistics.npz     the DP-noised per-class statistics and the released class Gaussians (safe to share)
    synthetic/            images/<index>_<class>.png, labels.csv (file,label,class), synthetic.npz (images uint8
                          (N, 3, S, S), labels int64, classes)
    grids/<class>.png     up to 8 x 8 synthetic samples of each released class
    manifest.json         epsilon, delta, R, adjacency, every multiplier and std, autoencoder identity, counts,
                          per-class release diagnostics and warnings
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from server_app.fedkt_release import Release

DP_STATISTICS_FILE = "dp_statistics.npz"
MANIFEST_FILE = "manifest.json"
SYNTHETIC_DIR = "synthetic"
LABELS_FILE = "labels.csv"
ARRAY_FILE = "synthetic.npz"
GRID_DIR = "grids"
GRID_COLUMNS = 8


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """(N, 3, S, S) images in [0, 1] -> uint8 of the same shape."""
    return (images.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8).numpy()


def write_dp_statistics(path: Path, release: Release, classes: Sequence[str]) -> Path:
    """The noisy sums, outer-product upper triangles and counts of every class, and the released Gaussians."""
    gaussians = release.gaussians
    np.savez(path, classes=np.array(classes), sums=release.noisy.sums, outer_upper=release.noisy.outer_upper,
             counts=release.noisy.counts, released_classes=gaussians.classes, means=gaussians.means,
             covariances=gaussians.covariances, counts_used=gaussians.counts)
    return Path(path)


def write_synthetic_set(folder: Path, images: np.ndarray, labels: np.ndarray, classes: Sequence[str]) -> Path:
    """PNG per image, labels.csv and one array file; `images` uint8 (N, 3, S, S), `labels` class indices."""
    folder = Path(folder)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for index, (image, label) in enumerate(zip(images, labels)):
        name = f"images/{index:06d}_{classes[label]}.png"
        Image.fromarray(image.transpose(1, 2, 0)).save(folder / name)
        rows.append((name, int(label), classes[label]))
    with (folder / LABELS_FILE).open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(("file", "label", "class"))
        writer.writerows(rows)
    np.savez(folder / ARRAY_FILE, images=images, labels=labels.astype(np.int64), classes=np.array(classes))
    return folder


def read_synthetic_set(folder: Path) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """(images float32 in [0, 1], labels int64, class names) from `synthetic.npz`, for training a model on it."""
    with np.load(Path(folder) / ARRAY_FILE) as arrays:
        images = torch.from_numpy(arrays["images"].astype(np.float32) / 255.0)
        return images, torch.from_numpy(arrays["labels"]), [str(c) for c in arrays["classes"]]


def write_class_grids(folder: Path, images: np.ndarray, labels: np.ndarray, classes: Sequence[str]) -> list[Path]:
    """One picture per released class: its first samples tiled GRID_COLUMNS wide, up to GRID_COLUMNS rows."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for label in np.unique(labels):
        tiles = images[labels == label][: GRID_COLUMNS * GRID_COLUMNS].transpose(0, 2, 3, 1)
        rows = -(-len(tiles) // GRID_COLUMNS)
        size = tiles.shape[1]
        canvas = np.full((rows * (size + 2), GRID_COLUMNS * (size + 2), 3), 255, dtype=np.uint8)
        for i, tile in enumerate(tiles):
            r, c = divmod(i, GRID_COLUMNS)
            canvas[r * (size + 2) + 1: r * (size + 2) + 1 + size, c * (size + 2) + 1: c * (size + 2) + 1 + size] = tile
        path = folder / f"{classes[label]}.png"
        Image.fromarray(canvas).save(path)
        written.append(path)
    return written


def write_manifest(path: Path, manifest: dict[str, Any]) -> Path:
    Path(path).write_text(json.dumps(manifest, indent=2) + "\n")
    return Path(path)
