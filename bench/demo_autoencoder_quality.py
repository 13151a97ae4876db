"""The shipped demo autoencoder's quality.json recomputed from its weights: PSNR and every classifier seed's score.

    .venv/bin/python bench/demo_autoencoder_quality.py [--autoencoder FOLDER] [--write-readme]

quality.json is written by `site-agent fedkt train-demo-autoencoder` and read by the demo and the site's FedKT-CSD
checks; this retrains the evaluation round's classifier on the held-out public images' reconstructions and on the
real images for each stored seed (minutes on 2 cores) and sets the recomputed values beside the stored ones. The
suite's guard test recomputes only the reconstruction PSNR and R (tests/fedkt_csd/test_fedkt_demo_autoencoder.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from readme_section import write_section

from federation_tools.demos.fedkt_csd import DEMO_AUTOENCODER
from fl_contract.models.dcae import load_autoencoder
from site_agent.fedkt_csd.demo_autoencoder import measure_quality, passes_quality_gate, read_quality


def compare(folder: Path) -> str:
    stored = read_quality(folder)
    if stored is None:
        raise SystemExit(f"{folder} has no quality.json: make it with `site-agent fedkt train-demo-autoencoder`")
    started = time.perf_counter()
    recomputed = measure_quality(load_autoencoder(folder).model, stored["held_out"]["train_images"]
                                 + stored["held_out"]["test_images"], seed=stored["held_out"]["split_seed"],
                                 classifier_seeds=len(stored["classifier"]["seeds"]))
    seconds = time.perf_counter() - started
    if recomputed["held_out"] != stored["held_out"]:
        raise SystemExit(f"held-out set differs: stored {json.dumps(stored['held_out'])}, "
                         f"recomputed {json.dumps(recomputed['held_out'])}")
    rows = ["| value | stored | recomputed | difference |", "| --- | ---: | ---: | ---: |",
            _row("reconstruction PSNR (dB)", stored["psnr_db"], recomputed["psnr_db"])]
    for images in ("reconstructions", "real"):
        for seed, old, new in zip(stored["classifier"]["seeds"], stored["per_classifier_seed"][images],
                                  recomputed["per_classifier_seed"][images], strict=True):
            rows.append(_row(f"balanced accuracy, trained on {images}, classifier seed {seed}", old, new))
    verdict = "pass" if passes_quality_gate(recomputed) else "FAIL"
    return "\n".join([f"`{folder.name}`: {stored['held_out']['test_images']} held-out test images, "
                      f"{len(stored['classifier']['seeds'])} classifier seeds, recomputed in {seconds:.0f} s; "
                      f"the recomputed scores {verdict} the gate ({stored['gate']} of the real-image score).", "",
                      *rows])


def _row(name: str, stored: float, recomputed: float) -> str:
    return f"| {name} | {stored:.4f} | {recomputed:.4f} | {recomputed - stored:+.4f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autoencoder", type=Path, default=DEMO_AUTOENCODER)
    parser.add_argument("--write-readme", action="store_true", help="replace the table in bench/README.md")
    args = parser.parse_args()
    table = compare(args.autoencoder)
    print(table)
    if args.write_readme:
        write_section("demo_autoencoder_quality", table)


if __name__ == "__main__":
    main()
