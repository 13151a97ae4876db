"""`site-agent fedkt ...`: the privacy officer's statistics export and the demo autoencoder.

    site-agent fedkt export --kit KIT --out FOLDER [--classes BCC,BKL,MEL,NV --dataset isic --autoencoder dcae ...]
    site-agent fedkt train-demo-autoencoder --out FOLDER [--images N --steps N ...]  (defaults: the shipped one's)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fl_contract.classes import PLAYERFL_CLASSES
from site_agent.kit.site_config import SiteConfig


def _export(args: argparse.Namespace) -> int:
    from fl_contract.device import select_device
    from fl_contract.models.dcae import load_autoencoder
    from site_agent.fedkt_csd.export import ExportSettings, write_export
    from site_agent.fedkt_csd.site_data import statistics_vector

    kit = Path(args.kit)
    config = SiteConfig.for_kit(kit)
    site = args.site or kit.resolve().name
    loaded = load_autoencoder(config.data_dir(args.autoencoder, site), select_device(config.device))
    settings = ExportSettings([c.strip() for c in args.classes.split(",")], args.image_size, args.holdout_fraction,
                              args.seed)
    vector = statistics_vector(loaded, config.data_dir(args.dataset, site), settings.classes, settings.image_size,
                               settings.holdout_fraction, settings.seed, config.compute.encode_batch_size)
    summary = write_export(Path(args.out), vector, settings, loaded.identity)
    print(summary.read_text())
    print(f"wrote {Path(args.out)}: review it, then run the job with reviewed_statistics=<dataset key of this folder>")
    return 0


def _train_demo_autoencoder(args: argparse.Namespace) -> int:
    from fl_contract.models.dcae import load_autoencoder
    from site_agent.fedkt_csd.demo_autoencoder import describe_quality, read_quality, train_demo_autoencoder

    given = {"n_images": args.images, "steps": args.steps, "batch_size": args.batch_size, "seed": args.seed,
             "quality_images": args.quality_images, "classifier_min_steps": args.quality_classifier_steps}
    folder = train_demo_autoencoder(Path(args.out), **{k: v for k, v in given.items() if v is not None})
    identity = load_autoencoder(folder).identity
    print(f"wrote {folder}: clip norm R = {identity.clip_norm:.3f} ({identity.clip_norm_provenance}); "
          f"weights sha256 {identity.weights_sha256}")
    print(describe_quality(read_quality(folder)))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`site-agent fedkt`: the site can export and review exactly what a FedKT-CSD job would send before it accepts one,
    and build the demo autoencoder without network access."""
    parser = subparsers.add_parser("fedkt", help="FedKT-CSD: export the site's statistics for review, demo autoencoder")
    commands = parser.add_subparsers(dest="fedkt_command", required=True, metavar="COMMAND")

    export = commands.add_parser("export",
                                 help="write exactly the statistics a FedKT-CSD job would send, with a summary")
    export.add_argument("--kit", required=True, help="this site's startup kit (its local/site_agent.json is read)")
    export.add_argument("--out", required=True, help="folder for the export (give it a dataset key to send it)")
    export.add_argument("--site", help="site name for {site_name} in configured paths (default: the kit folder's name)")
    export.add_argument("--classes", default=",".join(PLAYERFL_CLASSES), help="the job's classes, comma separated")
    export.add_argument("--dataset", default="isic", help="dataset key of the ISIC-format folder")
    export.add_argument("--autoencoder", default="dcae", help="dataset key of the autoencoder folder")
    export.add_argument("--image-size", type=int, default=64)
    export.add_argument("--holdout-fraction", type=float, default=0.2)
    export.add_argument("--seed", type=int, default=0, help="the job's seed (it fixes the held-out split)")
    export.set_defaults(func=_export)

    demo = commands.add_parser("train-demo-autoencoder",
                               help="train the small demo DC-AE on public synthetic images and save it with its "
                                    "clip norm")
    demo.add_argument("--out", required=True, help="folder to write (config.json, weights, clip_norm.json)")
    # No defaults here: train_demo_autoencoder's are the recipe of the demo autoencoder the project ships, and its
    # quality.json records them.
    demo.add_argument("--images", type=int, help="public synthetic images to train on")
    demo.add_argument("--steps", type=int, help="training steps (about 0.09 s each on 2 idle CPU cores)")
    demo.add_argument("--batch-size", type=int)
    demo.add_argument("--seed", type=int)
    demo.add_argument("--quality-images", type=int,
                      help="held-out public images for quality.json (two thirds train its classifiers, a third tests)")
    demo.add_argument("--quality-classifier-steps", type=int,
                      help="optimiser steps of those classifiers, at least (they also run 10 passes)")
    demo.set_defaults(func=_train_demo_autoencoder)
