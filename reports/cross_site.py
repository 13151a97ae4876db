"""A training run's cross-site evaluation (results.json's `cross_site`) as the page a consortium reads: for each
headline metric a sites x models table (rows: the site scoring, on its held-out cases; columns: the global model
and each local model that left its site, or PLayer-FL's personalised model), the first metric's heatmap, and why a
site's model is not in it; and as JSON.

`fl-eval-report` writes it for a run that has one; `fl-seg-report` prints the Dice table and draws the heatmap
beside a segmentation run's training curves, `playerfl-report` lists a PLayer-FL run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fl_contract.playerfl.protocol import PERSONALISED
from reports.evaluation import score_heatmap, write_files
from reports.html_page import bullets, cell, definitions, document, image, text
from reports.html_page import table as html_table

TITLES = {"dice_mean": ("Dice, mean of TC, WT, ET", 3), "hd95_mean": ("HD95 (mm), mean of TC, WT, ET", 1),
          "lesion_dice_mean": ("lesion-wise Dice, mean", 3), "lesion_hd95_mean": ("lesion-wise HD95 (mm), mean", 1),
          "balanced_accuracy": ("balanced accuracy", 3), "macro_f1": ("macro-F1", 3)}
"""Each matrix's title and digits, by its key without the split (test_dice_mean -> dice_mean)."""


def has_cross_site(results: dict[str, Any]) -> bool:
    return bool((results.get("cross_site") or {}).get("sites"))


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """What the page shows, as data: the run, the models scored, one matrix per headline metric (by its key in
    results.json, e.g. test_dice_mean), what was withheld."""
    cross = results["cross_site"]
    job = results.get("job") or {}
    run = {"status": results.get("status"), "workflow": job.get("workflow"), "method": job.get("method"),
           "rounds": len(results.get("rounds") or []), "label_map": job.get("label_map"),
           "model": (results.get("best_model") or {}).get("file"), "global model": cross.get("global_model")}
    return {"run": run, "split": cross["split"], "models": cross["models"], "sites": sorted(cross["sites"]),
            "matrix": cross["matrix"], "withheld": cross.get("withheld") or {},
            "no_result": cross.get("no_result") or []}


def _title(table: dict[str, Any], key: str) -> tuple[str, int]:
    return TITLES.get(key.removeprefix(f"{table['split']}_"), (key, 3))


def heatmap_png(table: dict[str, Any]) -> bytes:
    """The first matrix (Dice, or a classifier's balanced accuracy: both on a 0-1 scale) as a heatmap."""
    key = next(iter(table["matrix"]))
    return score_heatmap(table["matrix"][key], f"{_title(table, key)[0]} on each site's {table['split']} cases")


def page(table: dict[str, Any], heatmap: bytes) -> str:
    """The HTML page: what was scored on which cases, the run, one table per metric, what is absent and why."""
    models = table["models"]
    if PERSONALISED in models:
        intro = (f"After training, each site scored its own personalised model (at home only: its personal layers "
                 f"never leave it) and the server's global model on its {text(table['split'])} cases, which neither "
                 "trained on.")
    else:
        intro = (f"After training, each site scored the global model and every local model that its own site let "
                 f"leave on its {text(table['split'])} cases, which no model trained on. Rows: the site scoring; "
                 "columns: the model (global, or the site that trained it), so a site's score of its own model is "
                 "that model at home.")
    sections = [f"<p>{intro}</p>", "<h2>Run</h2>",
                definitions([(k, v) for k, v in table["run"].items() if v is not None])]
    for number, (key, values) in enumerate(table["matrix"].items()):
        title, digits = _title(table, key)
        sections += [f"<h2>{text(title)}</h2>",
                     html_table(["site", *models], [(site, [cell((values.get(site) or {}).get(m), digits)
                                                            for m in models]) for site in table["sites"]])]
        if number == 0:
            sections.append(image(heatmap, f"{title} per site and model"))
    notes = [f"<b>{text(site)}</b>'s model: {text(why)}" for site, why in sorted(table["withheld"].items())]
    notes += [f"<b>{text(site)}</b> scored no model" for site in table["no_result"]]
    sections += ["<h2>Models not scored</h2>", bullets(notes, "none: every model the job allows was scored")]
    return document("Cross-site evaluation", sections)


def write_report(results: dict[str, Any], out: Path) -> list[Path]:
    """cross_site.html, cross_site.json and cross_site.png in `out`."""
    table = summary(results)
    heatmap = heatmap_png(table)
    return write_files(out, page(table, heatmap), table, heatmap, stem="cross_site")
