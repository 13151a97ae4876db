"""Reproduction harness: PLayer-FL and every baseline over seeds on a heterogeneous synthetic federation.

Protocol (the paper's, scaled to 2 CPU cores): one synthetic federation of 4 ISIC-format sites (label skew from one
Dirichlet(alpha) draw, a skin tint per site), written once and degraded as cheap cameras would (`degrade_site`: the
generator's lesions are told apart by colour alone, and Local reached macro-F1 1.0 on them); a learning-rate search per
method on a tuning seed that is not an evaluation seed (the rate with the best training-size-weighted validation
macro-F1 of the sites' chosen models wins); then every method at its rate over the evaluation seeds (seed: initial
weights, data split, shuffling, augmentation). PLayer-FL runs first for each seed, so PLayer-FL-Random leaves its p out
of the draw. Each run is the exported job's own controller and site tasks in one process
(`research.playerfl_inprocess`; FLARE's simulator would take about 2 minutes a run). The report
(`reports.playerfl`): medians with the lowest and highest seed, mean ranks for macro-F1, fairness and incentivisation,
Friedman and Wilcoxon tests, the splits.

Torch runs single-threaded: on 2 shared cores two threads contend (measured: one 64 px epoch of the narrow CNN took
0.37 s with 1 thread and 2.7 s with 2 under load).

    .venv/bin/python bench/playerfl_compare.py OUT [--seeds 0 1 2 3 4 --lrs 1e-3 5e-3 1e-2 --rounds 12 --images 300
        --size 48 --write-readme]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import source_checkout  # noqa: F401  (sys.path: research/ and tests/harness/ of this checkout)
import torch
from PIL import Image, ImageFilter
from readme_section import write_section

from fl_contract.playerfl.protocol import METHODS
from jobs.playerfl.spec import PLayerFLParams
from reports.playerfl import load_runs, write_report
from reports.playerfl.ranks import markdown as ranks_markdown
from reports.playerfl.ranks import rankings
from reports.playerfl.table import markdown, method_table
from research.playerfl_compare import write_demo_sites
from research.playerfl_inprocess import run_in_process
from server_app.metrics import WEIGHT
from site_agent.data.isic import IMAGE_FOLDER

NARROW_CNN5 = {"channels": [4, 8, 16, 32, 64], "hidden": 32}
"""The paper's CNN at 1/8 of its widths (~0.03M parameters): 2 shared CPU cores."""
PAPER_ISIC = {"playerfl": 68.6, "local": 68.9, "fedavg": 66.4, "fedbabu": 67.3}
"""Accuracy (%) on the real 4-centre ISIC-2019 federation as the paper reports it
(docs/algorithms.md#reference-isic-2019-setup)."""
TUNING_SEED = 100
SITE_CAST, IMAGE_GAIN, BLUR_PX, NOISE = 0.2, 0.3, 1.0, 25.0
"""Per site a colour cast (each channel x U(1 +- 0.2), its dermoscope); per image a colour gain and a brightness
(x U(1 +- 0.3) each), a Gaussian blur of 1 px and pixel noise of std 25 (of 255): measured on seed 100 at 5e-3,
Local's macro-F1 fell from 1.0 to 0.67 and FedAvg's to 0.55."""
ORDER = ("playerfl", *(m for m in METHODS if m != "playerfl"))


def degrade_site(folder: Path, site_index: int, seed: int) -> None:
    """Rewrite the site's images in place, deterministic by (seed, site, image)."""
    cast = np.random.default_rng([seed, site_index]).uniform(1 - SITE_CAST, 1 + SITE_CAST, 3)
    for number, path in enumerate(sorted((folder / IMAGE_FOLDER).glob("*.jpg"))):
        rng = np.random.default_rng([seed, site_index, number])
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB").filter(ImageFilter.GaussianBlur(BLUR_PX)), dtype=np.float64)
        gain = cast * rng.uniform(1 - IMAGE_GAIN, 1 + IMAGE_GAIN, 3) * rng.uniform(1 - IMAGE_GAIN, 1 + IMAGE_GAIN)
        pixels = pixels * gain + rng.normal(0, NOISE, pixels.shape)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, quality=92)


def run(out: Path, method: str, seed: int, lr: float, sites: dict[str, Path], job: dict[str, Any],
        playerfl_split: int, timings: dict[str, float]) -> dict[str, Any]:
    """One job run (skipped when an earlier invocation finished it); returns its results.json."""
    name = f"{method}-lr{lr:g}-seed{seed}"
    results = out / "runs" / name / "server" / "app_server" / "results.json"
    if not results.is_file() or json.loads(results.read_text())["status"] != "finished":
        start = time.perf_counter()
        params = PLayerFLParams(method=method, seed=seed, learning_rate=lr, playerfl_split=playerfl_split, **job)
        run_in_process(params, sites, out / "runs" / name)
        timings[name] = time.perf_counter() - start
        (out / "timings.json").write_text(json.dumps({"runs_s": timings}, indent=2))
        print(f"{name}: {timings[name]:.0f} s", flush=True)
    record: dict[str, Any] = json.loads(results.read_text())
    record["path"], record["name"] = results, name
    return record


def validation_score(record: dict[str, Any]) -> float:
    """Training-size-weighted validation macro-F1 of the models the sites chose (what the search may look at)."""
    sites = record["evaluation"].values()
    weights = np.array([s[WEIGHT] for s in sites], dtype=np.float64)
    return float(weights @ np.array([s["best_val_macro_f1"] for s in sites]) / weights.sum())


def seed_set(out: Path, seed: int, rates: dict[str, float], sites: dict[str, Path], job: dict[str, Any],
             methods: Sequence[str], timings: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Every method once for `seed`, PLayer-FL first (its p is what PLayer-FL-Random leaves out)."""
    records: dict[str, dict[str, Any]] = {}
    for method in (m for m in ORDER if m in methods):
        split = records["playerfl"]["federated_layers"] if method == "playerfl_random" and "playerfl" in records else 0
        records[method] = run(out, method, seed, rates[method], sites, job, split, timings)
    return records


def readme_text(args: argparse.Namespace, rates: dict[str, float], search: dict[str, dict[float, float]],
                runs: list[Any], seconds: float) -> str:
    table = method_table(runs)
    paper = ["| method | paper, ISIC-2019 accuracy (%) | this harness, balanced acc. (median) | macro-F1 (median) |",
             "| --- | ---: | ---: | ---: |"]
    paper += [f"| {m} | {v} | {table[m]['test_balanced_accuracy'][0]:.3f} | {table[m]['test_macro_f1'][0]:.3f} |"
              for m, v in PAPER_ISIC.items() if m in table]
    splits = {r.seed: r.split["federated_layers"] for r in runs if r.method == "playerfl" and r.split}
    search_lines = [f"{m}: " + ", ".join(f"{lr:g} -> {s:.3f}" for lr, s in sorted(search[m].items()))
                    + f" (chosen {rates[m]:g})" for m in search]
    return "\n".join([
        f"{len(runs)} runs: {len(args.methods)} methods x seeds {args.seeds}; 4 synthetic sites of "
        f"{args.images} images "
        f"at {args.size} px (Dirichlet({args.alpha}) label skew, data seed {args.data_seed}; per-site colour cast, "
        f"per-image colour and brightness gain, blur and noise), narrow CNN5 "
        f"{NARROW_CNN5}, {args.rounds} rounds of 1 local epoch, batch {args.batch_size}, focal loss gamma 1 with the "
        f"site's class weights, MONAI augmentation, Adam kept per site; {len(search) * len(args.lrs) + len(runs)} runs "
        f"took {seconds / 60:.0f} min on 2 shared CPU cores (1 torch thread).", "",
        "Learning-rate search on seed 100 (validation macro-F1, training-size weighted): "
        + "; ".join(search_lines) + ".",
        "", markdown(table), ranks_markdown(rankings(runs)),
        f"PLayer-FL's federated layers p per seed: {splits}.", "",
        "The paper's ISIC-2019 numbers beside ours (**different data**: the paper's 4 real FLamby centres at 200 px "
        "and the full CNN, ours synthetic; only the ordering can be compared):", "", *paper])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 5e-3, 1e-2],
                        help="learning rates searched per method")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--images", type=int, default=300, help="images per site (64%% train, 16%% val, 20%% test)")
    parser.add_argument("--size", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--alpha", type=float, default=1.0, help="Dirichlet label-skew concentration")
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--write-readme", action="store_true", help="put the results in bench/README.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    timings_file = args.out / "timings.json"  # run times across invocations: the harness resumes finished runs
    timings: dict[str, float] = json.loads(timings_file.read_text())["runs_s"] if timings_file.is_file() else {}
    out: Path = args.out
    if not (out / "data").is_dir():
        for index, name in enumerate(
                write_demo_sites(out / "data", 4, args.images, args.size, args.alpha, args.data_seed), 1):
            degrade_site(out / "data" / name, index, args.data_seed)
    names = sorted(p.name for p in (out / "data").iterdir())
    sites = {name: (out / "data" / name).resolve() for name in names}
    job = {"num_rounds": args.rounds, "image_size": args.size, "batch_size": args.batch_size, "tracking": False,
           "min_clients": len(sites), "model_args": NARROW_CNN5}
    search: dict[str, dict[float, float]] = {m: {} for m in ORDER if m in args.methods}
    used = []
    for lr in args.lrs:
        for method, record in seed_set(out, TUNING_SEED, dict.fromkeys(METHODS, lr), sites, job, args.methods,
                                       timings).items():
            search[method][lr] = validation_score(record)
            used.append(record["name"])
    rates = {m: max(scores, key=lambda lr: scores[lr]) for m, scores in search.items()}
    evaluated = [r for seed in args.seeds
                 for r in seed_set(out, seed, rates, sites, job, args.methods, timings).values()]
    runs = load_runs([r["path"] for r in evaluated])
    report = write_report(runs, out / "report")
    seconds = sum(timings[name] for name in used + [r["name"] for r in evaluated] if name in timings)
    timings_file.write_text(json.dumps({"total_s": seconds, "runs_s": timings, "rates": rates}, indent=2))
    text = readme_text(args, rates, search, runs, seconds)
    print(text, f"\nreport: {report}")
    if args.write_readme:
        write_section("playerfl_compare", text)


if __name__ == "__main__":
    main()
