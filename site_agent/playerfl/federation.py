"""The paper's ISIC federation from a real ISIC 2019 training folder: one ISIC-format folder per FLamby centre.

PLayer-FL's ISIC setup: FLamby's Fed-ISIC2019 centres (from each image's `lesion_id`; HAM images split further by
the `dataset` column of the HAM10000 metadata, which FLamby ships), the 4 centres with most images (BCN,
HAM_vidir_molemax, HAM_vidir_modern, HAM_rosendahl), the four classes BCC, BKL, MEL and NV, and at most 5000
images per centre (a seeded sample, kept in CSV order). Images without a lesion_id belong to no centre and are
left out, as FLamby does. Each site folder holds the two official CSVs (rows copied as they are) and the images,
copied or hard-linked, so `site-agent check` and the jobs read it like any site's data; `federation.json` says
which centre each folder is and what it holds.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fl_contract.classes import PLAYERFL_CLASSES
from site_agent.data.isic import (
    FLAMBY_CENTERS,
    GROUND_TRUTH_CSV,
    IMAGE_FOLDER,
    METADATA_CSV,
    IsicRecord,
    flamby_center,
    read_isic_site,
)
from site_agent.data.readers.reader import DataError

PAPER_CENTRES = FLAMBY_CENTERS[:4]
PAPER_CAP = 5000
MANIFEST = "federation.json"


@dataclass(frozen=True)
class FederationSite:
    """One written site: its folder name, FLamby centre, images per class, and how many the cap left out."""

    site: str
    centre: str
    images: int
    per_class: dict[str, int]
    left_out_by_cap: int


def read_ham_sources(path: Path) -> dict[str, str]:
    """HAM10000 metadata (`image_id`, `dataset` columns): image name -> source (e.g. "vidir_molemax")."""
    with Path(path).open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"image_id", "dataset"} <= set(rows[0]):
        raise DataError(f"{path}: not the HAM10000 metadata (needs columns image_id and dataset); FLamby ships it as "
                        "flamby/datasets/fed_isic2019/HAM10000_metadata")
    return {row["image_id"]: row["dataset"] for row in rows}


def centre_records(records: Sequence[IsicRecord], ham_sources: dict[str, str] | None) -> dict[str, list[IsicRecord]]:
    """The records of each FLamby centre; images without a lesion_id are left out (FLamby assigns them none), and so
    are HAM images without `ham_sources` (their centre is unknown)."""
    by_centre: dict[str, list[IsicRecord]] = {}
    for record in records:
        if not record.lesion_id or (record.lesion_id.startswith("HAM_") and ham_sources is None):
            continue
        source = (ham_sources or {}).get(record.image.removesuffix("_downsampled"))
        by_centre.setdefault(FLAMBY_CENTERS[flamby_center(record.lesion_id, source)], []).append(record)
    return by_centre


def build_federation(source: Path, out: Path, ham_metadata: Path | None = None, centres: Sequence[str] = PAPER_CENTRES,
                     cap: int = PAPER_CAP, seed: int = 0, link: bool = False) -> list[FederationSite]:
    """Write `out/site-1..N`, one per centre in `centres` order, and `out/federation.json`; returns what was written."""
    unknown = sorted(set(centres) - set(FLAMBY_CENTERS))
    if unknown:
        raise ValueError(f"unknown centres {unknown}; FLamby's are {list(FLAMBY_CENTERS)}")
    if ham_metadata is None and any(c.startswith("HAM_") for c in centres):
        raise DataError("HAM centres need the HAM10000 metadata (--ham-metadata), which names each HAM image's source")
    source, out = Path(source), Path(out)
    records = read_isic_site(source, classes=PLAYERFL_CLASSES)
    by_centre = centre_records(records, read_ham_sources(ham_metadata) if ham_metadata else None)
    truth, metadata = _rows(source / GROUND_TRUTH_CSV), _rows(source / METADATA_CSV)
    rng = np.random.default_rng(seed)
    written = []
    for index, centre in enumerate(centres, start=1):
        members = by_centre.get(centre, [])
        if not members:
            raise DataError(f"{source}: no image of centre {centre} among the classes {list(PLAYERFL_CLASSES)}")
        keep = sorted(rng.choice(len(members), size=min(cap, len(members)), replace=False))
        chosen = [members[i] for i in keep]
        site = f"site-{index}"
        _write_site(out / site, chosen, truth, metadata, link)
        per_class = Counter(r.diagnosis for r in chosen)
        written.append(FederationSite(site, centre, len(chosen), {c: per_class[c] for c in PLAYERFL_CLASSES},
                                      len(members) - len(chosen)))
    (out / MANIFEST).write_text(json.dumps({"source": str(source.resolve()), "cap": cap, "seed": seed,
                                            "sites": [asdict(s) for s in written]}, indent=2))
    return written


def _rows(path: Path) -> tuple[list[str], dict[str, dict[str, str]]]:
    """(header, image name -> row) of an official CSV, read as the ISIC archive ships it (UTF-8, commas)."""
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        rows = {row["image"]: row for row in reader}
    return list(reader.fieldnames or []), rows


def _write_site(folder: Path, records: Sequence[IsicRecord], truth: tuple[list[str], dict[str, dict[str, str]]],
                metadata: tuple[list[str], dict[str, dict[str, str]]], link: bool) -> None:
    images = folder / IMAGE_FOLDER
    images.mkdir(parents=True, exist_ok=True)
    for record in records:
        target = images / record.path.name
        if target.exists():
            continue
        if link:
            os.link(record.path, target)
        else:
            shutil.copy2(record.path, target)
    for name, (header, rows) in ((GROUND_TRUTH_CSV, truth), (METADATA_CSV, metadata)):
        with (folder / name).open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows[r.image] for r in records)
