"""`site-agent demo-data KIND`: write a site's synthetic demo data into a folder (deterministic by seed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fl_contract.classes import PLAYERFL_CLASSES, TRAINING_CLASSES
from fl_contract.labels import LABEL_MAPS
from site_agent.data.demo.label_skew import DEFAULT_PARTITION, PARTITIONS


def _linear(args: argparse.Namespace) -> int:
    from site_agent.data.demo import linear_demo  # readers import torch / MONAI: seconds that `--help` should not pay

    sizes = tuple(int(s) for s in args.sizes.split(","))
    path = linear_demo.write_linear_site(Path(args.out), args.site_index, sizes, args.seed)
    print(f"wrote {path} ({sizes[args.site_index - 1]} samples)")
    return 0


def _brats(args: argparse.Namespace) -> int:
    from site_agent.data.brats_case import DATALIST_NAME
    from site_agent.data.demo import synthetic_brats

    cases = synthetic_brats.write_brats_site(
        Path(args.out), args.site_index, args.cases, (args.size,) * 3, args.seed, args.layout,
        LABEL_MAPS[args.label_map],
    )
    print(f"wrote {len(cases)} {args.layout} cases of {args.size}^3 voxels and {Path(args.out) / DATALIST_NAME}")
    return 0


def _isic(args: argparse.Namespace) -> int:
    from site_agent.data.demo import synthetic_isic
    from site_agent.data.isic import IMAGE_FOLDER

    classes = tuple(args.classes.split(","))
    out = synthetic_isic.write_isic_site(
        Path(args.out), args.site_index, args.sites, args.images, classes, args.alpha, args.size, args.seed,
        args.partition,
    )
    images = len(list((out / IMAGE_FOLDER).glob("*.jpg")))
    print(f"wrote {images} images of classes {','.join(classes)} to {out}")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`site-agent demo-data`: each kind writes the synthetic data its job kind expects, so a site can rehearse a job
    end to end before any patient data is involved."""
    parser = subparsers.add_parser("demo-data", help="make synthetic demo data for this site")
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")

    linear = kinds.add_parser("linear", help="the FedAvg reference linear-regression slice of one site")
    linear.add_argument("--site-index", type=int, required=True, help="1-based index of this site")
    linear.add_argument("--out", required=True, help="data folder of this site")
    linear.add_argument("--sizes", default="50,200,500",
                        help="samples per site, comma separated (reference: 50,200,500)")
    linear.add_argument("--seed", type=int, default=0)
    linear.set_defaults(func=_linear)

    brats = kinds.add_parser("brats", help="synthetic glioma MRI cases: DICOM series (or NIfTI) and NIfTI labels")
    brats.add_argument("--site-index", type=int, required=True,
                       help="1-based index of this site (sets scanner and tumour size)")
    brats.add_argument("--out", required=True, help="data folder of this site (one sub-folder per case)")
    brats.add_argument("--cases", type=int, default=4)
    brats.add_argument("--size", type=int, default=48, help="volume edge in voxels")
    brats.add_argument("--layout", choices=("dicom", "nifti"), default="dicom")
    brats.add_argument("--label-map", choices=sorted(LABEL_MAPS), default="brats2021")
    brats.add_argument("--seed", type=int, default=0)
    brats.set_defaults(func=_brats)

    isic = kinds.add_parser("isic", help="synthetic ISIC-2019-format dermoscopy site with label skew")
    isic.add_argument("--site-index", type=int, required=True, help="1-based index of this site")
    isic.add_argument("--out", required=True, help="data folder of this site")
    isic.add_argument("--sites", type=int, default=3, help="number of sites sharing the Dirichlet draw")
    isic.add_argument("--images", type=int, default=40,
                      help="images of this site (under --partition class: per site on average)")
    isic.add_argument("--classes", default=",".join(PLAYERFL_CLASSES),
                      help=f"comma separated, from {','.join(TRAINING_CLASSES)}")
    isic.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration: smaller, more label skew")
    isic.add_argument("--partition", choices=PARTITIONS, default=DEFAULT_PARTITION,
                      help="site: each site draws its class proportions (a class can be rare everywhere); class: "
                           "each class is spread over the sites (every class equally large in the federation)")
    isic.add_argument("--size", type=int, default=64, help="image edge in pixels")
    isic.add_argument("--seed", type=int, default=0)
    isic.set_defaults(func=_isic)
