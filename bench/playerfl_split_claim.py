"""Does PLayer-FL's split answer to the data? Federations built so that the paper's reasoning predicts different p.

    nice -n 19 .venv/bin/python bench/playerfl_split_claim.py OUT [--seeds 0 1 2 3 4 --images 64 --size 16
        --rounds 4 --local-epochs 3 --batch-size 8 --write-readme]

The claim: federation sensitivity after one epoch tells which layers may be averaged. Where sites differ in
low-level appearance (scanners: colour, contrast, blur, noise), the early layers should be the site-specific ones
and the split early (small p); where they differ only in labels, the head is, and the split late (p = L - 1). One
pool of synthetic ISIC-format images (`write_isic_site`, balanced classes, one skin tint) is dealt to 4 sites three
ways, data seed fixed:

- appearance: every class dealt evenly (same label distribution), then each site's images rewritten with its own
  look (`SITE_LOOKS`: colour cast, contrast, blur, noise);
- labels: each class dealt by Dirichlet(0.1) proportions over the sites (redrawn until every site holds
  `MIN_SITE_IMAGES`), images untouched (the same appearance everywhere);
- both: the labels partition, then the appearance looks.

Per federation and seed (seed: initial weights, data split, shuffling, augmentation; the same at every kind), the job's
own controller and site tasks in one process (`research.playerfl_inprocess`, as `playerfl_compare.py`):
PLayer-FL at the job's defaults (t = 1.5, total normalisation), then PLayer-FL with the split rule replaced by each
fixed p = 1..L-1 (the same sites, curves and seed; the run at PLayer-FL's own p is PLayer-FL's). Reported: each site's
and the federation's p, p under the other normalisation and over the t grid (from the same curves), the per-layer curves
(`playerfl_split_claim.png`), and the training-size-weighted test macro-F1 of every p. Narrow CNN5, torch on one
thread."""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import source_checkout  # noqa: E402, F401  (sys.path: research/ and tests/harness/ of this checkout)
import torch  # noqa: E402
from PIL import Image, ImageFilter  # noqa: E402
from readme_section import write_section  # noqa: E402

from jobs.playerfl.spec import PLayerFLParams  # noqa: E402
from research.playerfl_inprocess import run_in_process  # noqa: E402
from server_app import playerfl_split  # noqa: E402
from server_app.metrics import WEIGHT  # noqa: E402
from server_app.playerfl_split import (  # noqa: E402
    NORMALISATIONS,
    THRESHOLD_GRID,
    SplitInputs,
    choose_split,
    combine_curves,
    normalise_curve,
    threshold_split,
)
from site_agent.data.demo.synthetic_isic import write_isic_site  # noqa: E402
from site_agent.data.isic import GROUND_TRUTH_CSV, IMAGE_FOLDER, METADATA_CSV  # noqa: E402

NARROW_CNN5 = {"channels": [4, 8, 16, 32, 64], "hidden": 32}
SITES = 4
KINDS = ("appearance", "labels", "both")
LABEL_ALPHA = 0.1
MIN_SITE_IMAGES = 24
SITE_LOOKS = (
    {"cast": (1.0, 1.0, 1.0), "contrast": 1.0, "blur": 0.0, "noise": 0.0},
    {"cast": (1.3, 1.0, 0.7), "contrast": 0.6, "blur": 0.0, "noise": 0.0},
    {"cast": (0.75, 0.9, 1.25), "contrast": 1.0, "blur": 1.5, "noise": 0.0},
    {"cast": (1.0, 1.1, 1.0), "contrast": 1.4, "blur": 0.0, "noise": 30.0},
)
"""Per site: channel gains, contrast about the image mean, Gaussian blur radius (px), pixel noise std (of 255)."""


Pool = tuple[list[str], list[str], list[tuple[str, int, list[str], list[str]]]]


def write_pool(folder: Path, images: int, size: int, seed: int) -> Pool:
    """One site of balanced classes: its CSV headers and per image (name, label index, ground truth, metadata)."""
    write_isic_site(folder, 1, n_sites=1, n_images=images, alpha=1000.0, size=size, seed=seed)
    with (folder / GROUND_TRUTH_CSV).open() as f:
        truth = list(csv.reader(f))
    with (folder / METADATA_CSV).open() as f:
        meta = list(csv.reader(f))
    by_name = {row[0]: row for row in meta[1:]}
    images_ = [(row[0], next(i for i, v in enumerate(row[1:]) if float(v) == 1.0), row, by_name[row[0]])
               for row in truth[1:]]
    return truth[0], meta[0], images_


def deal(labels: np.ndarray, kind: str, seed: int) -> np.ndarray:
    """Site index (0-based) of every pool image: classes dealt evenly, or by Dirichlet(LABEL_ALPHA) per class."""
    rng = np.random.default_rng([seed, 25])
    sites = np.empty(labels.size, dtype=int)
    for _ in range(1000):
        for label in np.unique(labels):
            members = rng.permutation(np.flatnonzero(labels == label))
            if kind == "appearance":
                sites[members] = np.arange(members.size) % SITES
            else:
                cuts = (np.cumsum(rng.dirichlet(np.full(SITES, LABEL_ALPHA)))[:-1] * members.size).astype(int)
                for site, part in enumerate(np.split(members, cuts)):
                    sites[part] = site
        if np.bincount(sites, minlength=SITES).min() >= MIN_SITE_IMAGES:
            return sites
    raise RuntimeError(f"no Dirichlet({LABEL_ALPHA}) deal gave every site {MIN_SITE_IMAGES} images; use more images")


def restyle(path: Path, look: dict[str, Any], rng: np.random.Generator) -> None:
    """Rewrite one image with a site's look (as a scanner would render it)."""
    with Image.open(path) as image:
        image = image.convert("RGB")
        if look["blur"]:
            image = image.filter(ImageFilter.GaussianBlur(look["blur"]))
        pixels = np.asarray(image, dtype=np.float64)
    mean = pixels.mean(axis=(0, 1), keepdims=True)
    pixels = (mean + look["contrast"] * (pixels - mean)) * np.asarray(look["cast"])
    pixels = pixels + rng.normal(0.0, look["noise"], pixels.shape) if look["noise"] else pixels
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, quality=92)


def write_federation(out: Path, pool_dir: Path, pool: Pool, kind: str, seed: int) -> dict[str, Path]:
    """The 4 site folders of one federation kind; returns site name -> folder."""
    truth_header, meta_header, images = pool
    labels = np.array([label for _, label, _, _ in images])
    assignment = deal(labels, "appearance" if kind == "appearance" else "labels", seed)
    sites = {}
    for index in range(SITES):
        folder = out / kind / f"site-{index + 1}"
        (folder / IMAGE_FOLDER).mkdir(parents=True, exist_ok=True)
        members = [images[i] for i in np.flatnonzero(assignment == index)]
        rng = np.random.default_rng([seed, index])
        for name, _, _, _ in members:
            target = folder / IMAGE_FOLDER / f"{name}.jpg"
            shutil.copyfile(pool_dir / IMAGE_FOLDER / f"{name}.jpg", target)
            if kind != "labels":
                restyle(target, SITE_LOOKS[index], rng)
        for file, header, rows in ((GROUND_TRUTH_CSV, truth_header, [m[2] for m in members]),
                                   (METADATA_CSV, meta_header, [m[3] for m in members])):
            with (folder / file).open("w", newline="") as f:
                csv.writer(f).writerows([header, *rows])
        sites[folder.name] = folder.resolve()
    return sites


@contextlib.contextmanager
def fixed_split(p: int) -> Iterator[None]:
    """PLayer-FL with its split rule replaced by a fixed p (its curves still recorded)."""
    original = playerfl_split.SPLIT_RULES["playerfl"]

    def rule(inputs: SplitInputs, log: Any) -> dict[str, Any]:
        return {**threshold_split(inputs, log), "rule": f"fixed p = {p}", "federated_layers": p}

    playerfl_split.SPLIT_RULES["playerfl"] = rule
    try:
        yield
    finally:
        playerfl_split.SPLIT_RULES["playerfl"] = original


def run(out: Path, sites: dict[str, Path], seed: int, p: int | None, job: dict[str, Any]) -> dict[str, Any]:
    """One run (PLayer-FL's own split for p None); resumes a finished one."""
    name = f"seed{seed}-" + ("playerfl" if p is None else f"p{p}")
    results = out / name / "server" / "app_server" / "results.json"
    if not results.is_file() or json.loads(results.read_text())["status"] != "finished":
        start, cpu = time.perf_counter(), time.process_time()
        with fixed_split(p) if p is not None else contextlib.nullcontext():
            run_in_process(PLayerFLParams(method="playerfl", seed=seed, **job), sites, out / name)
        print(f"{out.name}/{name}: {time.perf_counter() - start:.1f} s ({time.process_time() - cpu:.1f} s CPU)",
              flush=True)
    record: dict[str, Any] = json.loads(results.read_text())
    return record


def split_record(record: dict[str, Any]) -> dict[str, Any]:
    split: dict[str, Any] = next(r["split"] for r in record["rounds"] if "split" in r)
    return split


def variants(split: dict[str, Any], num_samples: dict[str, int]) -> dict[str, Any]:
    """p from the same raw curves under each normalisation and over the t grid."""
    raw = {s: c for s, c in split["site_curves"].items() if s not in split.get("excluded_sites", {})}
    out: dict[str, Any] = {}
    for normalisation in NORMALISATIONS:
        federation = combine_curves({s: normalise_curve(c, normalisation) for s, c in raw.items()}, num_samples)
        out[normalisation] = {str(t): choose_split(federation, t) for t in THRESHOLD_GRID}
    return out


def measure(out: Path, kind: str, sites: dict[str, Path], seeds: list[int], job: dict[str, Any],
            layers: int) -> list[dict[str, Any]]:
    rows = []
    for seed in seeds:
        chosen = run(out / kind, sites, seed, None, job)
        split = split_record(chosen)
        p = split["federated_layers"]
        scores = {p: chosen["summary"]["test_macro_f1"]}
        for fixed in range(1, layers):
            if fixed != p:
                scores[fixed] = run(out / kind, sites, seed, fixed, job)["summary"]["test_macro_f1"]
        samples = {s: int(v[WEIGHT]) for s, v in chosen["evaluation"].items()}
        rows.append({"kind": kind, "seed": seed, "p": p, "site_p": split["site_splits"],
                     "excluded": split.get("excluded_sites", {}), "scores": scores,
                     "federation_curve": split["federation_curve"], "site_curves": split["site_normalised_curves"],
                     "layers": split["layers"], "variants": variants(split, samples)})
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Per kind: every seed's federation curve (total-normalised) and seed 0's site curves."""
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 4), sharey=True, squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        mine = [r for r in rows if r["kind"] == kind]
        layers = mine[0]["layers"]
        for site, curve in sorted(mine[0]["site_curves"].items()):
            ax.plot(curve, linestyle=":", alpha=0.7, label=f"{site}, seed {mine[0]['seed']}")
        for r in mine:
            ax.plot(r["federation_curve"], color="black", alpha=0.6, marker=".",
                    label="federation, each seed" if r is mine[0] else None)
        ax.set_xticks(range(len(layers)), layers, rotation=45)
        ax.set_title(f"{kind}: p = {[r['p'] for r in mine]}")
        ax.set_ylabel("F_l / F_L")
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def table(rows: list[dict[str, Any]], layers: int) -> str:
    header = ("| federation | seed | PLayer-FL p | sites' own p | p, first_layer norm. | p over t " +
              f"{list(THRESHOLD_GRID)} | macro-F1 at PLayer-FL's p | " +
              " | ".join(f"p = {p}" for p in range(1, layers)) + " | best fixed p |")
    lines = [header, "|" + "---|" * (8 + layers - 1)]
    for r in rows:
        best = max(r["scores"], key=lambda p: r["scores"][p])
        own = " ".join(str(v) for _, v in sorted(r["site_p"].items()))
        excluded = f" (left out: {', '.join(r['excluded'])})" if r["excluded"] else ""
        lines.append(f"| {r['kind']} | {r['seed']} | {r['p']} | {own}{excluded} | "
                     f"{r['variants']['first_layer']['1.5']} | {list(r['variants']['total'].values())} | "
                     f"{r['scores'][r['p']]:.3f} | " + " | ".join(f"{r['scores'][p]:.3f}" for p in range(1, layers))
                     + f" | {best} |")
    lines += ["", "| federation | median macro-F1 at PLayer-FL's p | " +
              " | ".join(f"median, p = {p}" for p in range(1, layers)) + " |", "|" + "---|" * (layers + 1)]
    for kind in (k for k in KINDS if any(r["kind"] == k for r in rows)):
        mine = [r for r in rows if r["kind"] == kind]
        fixed = [np.median([r["scores"][p] for r in mine]) for p in range(1, layers)]
        lines.append(f"| {kind} | {np.median([r['scores'][r['p']] for r in mine]):.3f} | "
                     + " | ".join(f"{v:.3f}" for v in fixed) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--images", type=int, default=64, help="images per site (pool: 4x)")
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--local-epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=5e-3)
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start, cpu = time.perf_counter(), time.process_time()
    out: Path = args.out
    pool_dir = out / "data" / "pool"
    if pool_dir.exists():
        shutil.rmtree(out / "data")
    pool = write_pool(pool_dir, SITES * args.images, args.size, args.data_seed)
    job = {"num_rounds": args.rounds, "local_epochs": args.local_epochs, "image_size": args.size,
           "batch_size": args.batch_size, "tracking": False, "min_clients": SITES, "model_args": NARROW_CNN5,
           "learning_rate": args.learning_rate}
    layers = len(NARROW_CNN5["channels"]) + 2
    rows = []
    for kind in args.kinds:
        sites = write_federation(out / "data", pool_dir, pool, kind, args.data_seed)
        rows += measure(out / "runs", kind, sites, args.seeds, job, layers)
    minutes, cpu_minutes = (time.perf_counter() - start) / 60, (time.process_time() - cpu) / 60
    (out / "rows.json").write_text(json.dumps(rows, indent=2))
    figure = Path(__file__).with_name("playerfl_split_claim.png") if args.write_readme else out / "curves.png"
    plot(rows, figure)
    text = (f"{len(args.seeds)} seeds x {len(args.kinds)} federations; 4 sites of {args.images} images (pool data seed "
            f"{args.data_seed}) at {args.size} px, narrow CNN5 {NARROW_CNN5}, {args.rounds} rounds of "
            f"{args.local_epochs} "
            "local epochs (the curve after the first), "
            f"batch {args.batch_size}, Adam {args.learning_rate:g}; training-size-weighted test macro-F1; whole run "
            f"{minutes:.1f} min ({cpu_minutes:.1f} CPU-min) on 2 shared CPU cores (nice 19, 1 torch thread). Curves: "
            f"[playerfl_split_claim.png](playerfl_split_claim.png).\n\n" + table(rows, layers))
    print(text)
    if args.write_readme:
        write_section("playerfl_split_claim", text)


if __name__ == "__main__":
    main()
