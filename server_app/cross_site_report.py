"""A training run's cross-site evaluation (results.json's `cross_site`) as the page a consortium reads: for each
headline metric a sites x models table (rows: the site scoring, on its held-out cases; columns: the global model
and each local model that left its site), the Dice heatmap, and why a site's model is not in it; and as JSON.

`fl-eval-report` writes it for a run that has one; `fl-seg-report` prints the Dice table and draws the heatmap
beside the run's training curves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fl_contract.segmentation import DICE, HD95, LESION_DICE, LESION_HD95, MEAN, metric_key
from server_app.evaluation_report import score_heatmap, write_files
from server_app.html_page import bullets, cell, definitions, document, image, text
from server_app.html_page import table as html_table

METRICS = ((DICE, "Dice, mean of TC, WT, ET", 3), (HD95, "HD95 (mm), mean of TC, WT, ET", 1),
           (LESION_DICE, "lesion-wise Dice, mean", 3), (LESION_HD95, "lesion-wise HD95 (mm), mean", 1))


def has_cross_site(results: dict[str, Any]) -> bool:
    return bool((results.get("cross_site") or {}).get("sites"))


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """What the page shows, as data: the run, the models scored, one matrix per metric, what was withheld."""
    cross = results["cross_site"]
    job = results.get("job") or {}
    matrices = {metric: cross["matrix"].get(metric_key(cross["split"], metric, MEAN), {}) for metric, _, _ in METRICS}
    return {"run": {"status": results.get("status"), "workflow": job.get("workflow"),
                    "rounds": len(results.get("rounds") or []), "label_map": job.get("label_map"),
                    "model": (results.get("best_model") or {}).get("file")},
            "split": cross["split"], "models": cross["models"], "sites": sorted(cross["sites"]),
            "matrix": matrices, "withheld": cross.get("withheld") or {}, "no_result": cross.get("no_result") or []}


def heatmap_png(table: dict[str, Any]) -> bytes:
    return score_heatmap(table["matrix"][DICE], f"Dice mean on each site's {table['split']} cases, by model")


def page(table: dict[str, Any], heatmap: bytes) -> str:
    models = table["models"]
    sections = [
        f"<p>After training, each site scored the global model and every local model that its own site let leave "
        f"on its {text(table['split'])} cases, which no model trained on. Rows: the site scoring; columns: the "
        "model (global, or the site that trained it), so a site's score of its own model is that model at home.</p>",
        "<h2>Run</h2>", definitions([(k, v) for k, v in table["run"].items() if v is not None])]
    for metric, title, digits in METRICS:
        values = table["matrix"][metric]
        sections += [f"<h2>{text(title)}</h2>",
                     html_table(["site", *models], [(site, [cell((values.get(site) or {}).get(m), digits)
                                                            for m in models]) for site in table["sites"]])]
        if metric == DICE:
            sections.append(image(heatmap, "Dice per site and model"))
    notes = [f"<b>{text(site)}</b>'s model: {text(why)}" for site, why in sorted(table["withheld"].items())]
    notes += [f"<b>{text(site)}</b> scored no model" for site in table["no_result"]]
    sections += ["<h2>Models not scored</h2>", bullets(notes, "none: every site's model was scored at every site")]
    return document("Cross-site evaluation", sections)


def write_report(results: dict[str, Any], out: Path) -> list[Path]:
    """cross_site.html, cross_site.json and cross_site.png in `out`."""
    table = summary(results)
    heatmap = heatmap_png(table)
    return write_files(out, page(table, heatmap), table, heatmap, stem="cross_site")
