"""The FedAvg reference data set: y = X w + noise, w = (2, -3), one slice per site.

All sites' samples are drawn from one generator in site order, exactly as the reference run does
(docs/algorithms.md#fedavg-reference-run), so that a three-site federation reproduces its global weights.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from site_agent.data.readers.reader import DataError

TRUE_WEIGHTS = (2.0, -3.0)
REFERENCE_SITE_SIZES = (50, 200, 500)
FILE_NAME = "linear.npz"


def generate_linear_sites(
    sizes: tuple[int, ...] = REFERENCE_SITE_SIZES, seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(X, y) per site, drawn in order from `torch.manual_seed(seed)` as in the reference run."""
    torch.manual_seed(seed)
    true_w = torch.tensor(TRUE_WEIGHTS)
    sites = []
    for n in sizes:
        x = torch.randn(n, 2)
        y = x @ true_w + 0.1 * torch.randn(n)
        sites.append((x.numpy(), y.numpy()))
    return sites


def write_linear_site(
    out_dir: Path, site_index: int, sizes: tuple[int, ...] = REFERENCE_SITE_SIZES, seed: int = 0
) -> Path:
    """Write the slice of site `site_index` (1-based) to `out_dir/linear.npz`."""
    if not 1 <= site_index <= len(sizes):
        raise ValueError(f"site index {site_index} is out of range: the federation has sites 1..{len(sizes)}")
    x, y = generate_linear_sites(sizes, seed)[site_index - 1]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FILE_NAME
    np.savez(path, x=x, y=y)
    return path


def load_linear_site(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Read a site's (X, y); the `DataError` says which file is missing or malformed and how to make it."""
    path = Path(data_dir) / FILE_NAME
    if not path.is_file():
        raise DataError(
            f"{path}: no linear-regression data here; create it with "
            f"`site-agent demo-data linear --site-index N --out {data_dir}`"
        )
    regenerate = "regenerate it with `site-agent demo-data linear`"
    try:
        with np.load(path) as arrays:
            found = {name: arrays[name] for name in ("x", "y") if name in arrays.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise DataError(f"{path}: not a readable .npz file ({err}); {regenerate}") from err
    if len(found) < 2:
        raise DataError(f"{path}: missing arrays {sorted({'x', 'y'} - set(found))}; {regenerate}")
    x, y = found["x"], found["y"]
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise DataError(f"{path}: expected x of shape (n, d) and y of shape (n,), got {x.shape} and {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise DataError(f"{path}: contains NaN or infinite values; fix or regenerate the site's data")
    return torch.from_numpy(x), torch.from_numpy(y)
