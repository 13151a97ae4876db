"""Label skew of the demo sites: which classes each site holds, drawn from Dirichlet(alpha) (small alpha, strong
skew). Kept apart from the image generator so that `site-agent demo-data --help` lists the partitions without
importing the imaging stack."""

from __future__ import annotations

import numpy as np

PARTITIONS = ("site", "class")
"""How label skew is drawn. "site": each site draws its class proportions from Dirichlet(alpha) and holds
`n_images`, so a class can be rare in the whole federation (at alpha 0.5 and 3 sites of 400 images, 19 records of
one class at some seeds). "class": each class's images are spread over the sites by one Dirichlet(alpha) draw per
class (the label-skew partition of NIID-Bench, Li et al. 2022), so the federation holds every class equally,
`n_images` per site on average, and site sizes differ as hospitals' do."""
DEFAULT_PARTITION = "site"  # the skew every demo site had before "class" existed, drawn the same way


def site_class_proportions(n_sites: int, n_classes: int, alpha: float, seed: int = 0) -> np.ndarray:
    """(n_sites, n_classes) class proportions, one Dirichlet(alpha) row per site, drawn together from `seed`."""
    return np.random.default_rng(seed).dirichlet(np.full(n_classes, alpha), size=n_sites)


def class_partition_counts(n_sites: int, n_classes: int, total: int, alpha: float, seed: int = 0) -> np.ndarray:
    """(n_sites, n_classes) image counts: `total` images split evenly over the classes (the first classes take the
    remainder), each class spread over the sites by its own Dirichlet(alpha) shares, rounded so that every class's
    counts sum to its size exactly (largest remainders first)."""
    shares = np.random.default_rng(seed).dirichlet(np.full(n_sites, alpha), size=n_classes)
    sizes = np.full(n_classes, total // n_classes) + (np.arange(n_classes) < total % n_classes)
    exact = shares * sizes[:, None]
    counts = np.floor(exact).astype(int)
    for k in range(n_classes):
        short = sizes[k] - counts[k].sum()
        counts[k, np.argsort(counts[k] - exact[k])[:short]] += 1
    per_site: np.ndarray = counts.T
    return per_site
