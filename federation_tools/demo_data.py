"""Demo data shared by several demo jobs, so that each site's folder is written once and means the same to all."""

from __future__ import annotations

from pathlib import Path

from site_agent.data.demo.label_skew import DEFAULT_PARTITION
from site_agent.data.demo.synthetic_isic import write_isic_site

DEMO_SITES = 3
ISIC_IMAGES_PER_SITE = 96


def isic_demo_folder(site: str, root: Path, name: str = "isic") -> Path:
    """Where `isic_demo_site` writes `site`'s folder `name`."""
    return root / site / name


def isic_demo_site(index: int, site: str, root: Path, seed: int = 0, images: int = ISIC_IMAGES_PER_SITE,
                   name: str = "isic", partition: str = DEFAULT_PARTITION) -> str:
    """`<root>/<site>/<name>`: a synthetic ISIC-2019-format folder with the demo's label skew across its sites.
    `seed` draws another data set of the same sizes and skew (benchmarks repeat the demo over seeds); a job that needs
    more images per site, or another `partition` of the labels (`label_skew.PARTITIONS`), gives its own `name`."""
    return str(write_isic_site(isic_demo_folder(site, root, name), index, DEMO_SITES, images, seed=seed,
                               partition=partition))
