"""Demo data shared by several demo jobs, so that each site's folder is written once and means the same to all."""

from __future__ import annotations

from pathlib import Path

from site_agent.data.demo.synthetic_isic import write_isic_site

DEMO_SITES = 3
ISIC_IMAGES_PER_SITE = 96


def isic_demo_site(index: int, site: str, root: Path) -> str:
    """`<root>/<site>/isic`: a synthetic ISIC-2019-format folder with label skew across the demo's sites."""
    return str(write_isic_site(root / site / "isic", index, DEMO_SITES, ISIC_IMAGES_PER_SITE))
