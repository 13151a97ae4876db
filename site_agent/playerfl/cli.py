"""`site-agent isic-federation`: the PLayer-FL paper's ISIC federation, one site folder per FLamby centre.

    site-agent isic-federation --source ISIC_2019 --out FEDERATION --ham-metadata HAM10000_metadata [--cap 5000]
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _isic_federation(args: argparse.Namespace) -> int:
    from site_agent.playerfl.federation import MANIFEST, PAPER_CENTRES, build_federation  # MONAI: keep --help fast

    centres = [c.strip() for c in args.centres.split(",")] if args.centres else PAPER_CENTRES
    sites = build_federation(Path(args.source), Path(args.out), Path(args.ham_metadata) if args.ham_metadata else None,
                             centres, args.cap, args.seed, args.link)
    for site in sites:
        print(f"{site.site}: {site.centre}, {site.images} images {site.per_class}"
              + (f", {site.left_out_by_cap} left out by the cap" if site.left_out_by_cap else ""))
    print(f"wrote {Path(args.out) / MANIFEST}; point each site's dataset key at its folder")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("isic-federation", help="split a real ISIC 2019 folder into the PLayer-FL paper's "
                                                           "federation (FLamby centres, 4 classes, capped)")
    parser.add_argument("--source", required=True,
                        help="ISIC 2019 training folder (ground-truth and metadata CSVs, images)")
    parser.add_argument("--out", required=True, help="folder for site-1..N and federation.json")
    parser.add_argument("--ham-metadata", help="HAM10000 metadata CSV (image_id, dataset): splits HAM images by centre")
    parser.add_argument("--centres", help="FLamby centres in site order, comma separated (default: the paper's four, "
                                          "BCN and the three largest HAM sources)")
    parser.add_argument("--cap", type=int, default=5000, help="most images per centre (a seeded sample)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--link", action="store_true", help="hard-link the images instead of copying them")
    parser.set_defaults(func=_isic_federation)
