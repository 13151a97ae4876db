"""`site-agent demo-data KIND`: write a site's synthetic demo data into a folder (deterministic by seed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from site_agent.data import linear_demo


def _linear(args: argparse.Namespace) -> int:
    sizes = tuple(int(s) for s in args.sizes.split(","))
    path = linear_demo.write_linear_site(Path(args.out), args.site_index, sizes, args.seed)
    print(f"wrote {path} ({sizes[args.site_index - 1]} samples)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo-data", help="make synthetic demo data for this site")
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")

    linear = kinds.add_parser("linear", help="the FedAvg reference linear-regression slice of one site")
    linear.add_argument("--site-index", type=int, required=True, help="1-based index of this site")
    linear.add_argument("--out", required=True, help="data folder of this site")
    linear.add_argument("--sizes", default="50,200,500", help="samples per site, comma separated (reference: 50,200,500)")
    linear.add_argument("--seed", type=int, default=0)
    linear.set_defaults(func=_linear)
