"""An evaluation's results.json as the page a consortium reads: the model's provenance, each site's scores (Dice
and HD95 per region, their quartiles where the site sent them, lesion-wise means), the federation's pooled row, a
heatmap of Dice per site and region, and what each site withheld and why; and the same as JSON.

`fl-seg-report` writes it for a brats-evaluation result. The page is one self-contained HTML file (its heatmap
embedded as a PNG, no script, no web asset fetched), so it can be mailed or filed with the study's records.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fl_contract.evaluation import EVAL
from fl_contract.labels import REGIONS
from fl_contract.segmentation import (
    DICE,
    HD95,
    LESION_DICE,
    LESION_HD95,
    MEAN,
    QUARTILES,
    cases_key,
    metric_key,
    quartile_key,
)
from reports.html_page import bullets, cell, definitions, document, image, text
from reports.html_page import table as html_table

COLUMNS = (*REGIONS, MEAN)


def is_evaluation(results: dict[str, Any]) -> bool:
    return bool((results.get("job") or {}).get("workflow") == "evaluation")


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """What the page shows, as data: the model, one row per site (and the federation's), what was withheld."""
    rows = {site: _row(metrics) for site, metrics in sorted((results.get("sites") or {}).items())}
    federation = results.get("federation") or {}
    return {"status": results.get("status"), "error": results.get("error"),
            "model": {**(results.get("model_identity") or {}), "network": (results.get("job") or {}).get("network"),
                      "model_args": (results.get("job") or {}).get("model_args")},
            "sites": rows, "federation": _row(federation) if federation else {},
            "withheld": results.get("withheld") or {}, "case_rows": sorted(results.get("case_rows") or {}),
            "no_result": results.get("no_result") or [], "outcomes": results.get("outcomes") or {}}


def _row(metrics: dict[str, float]) -> dict[str, Any]:
    row: dict[str, Any] = {"cases": metrics.get(cases_key(EVAL))}
    for metric in (DICE, HD95, LESION_DICE, LESION_HD95):
        for region in COLUMNS:
            key = metric_key(EVAL, metric, region)
            if key in metrics:
                row[f"{metric}_{region.lower()}"] = {
                    "mean": metrics[key], **{q: metrics[quartile_key(EVAL, metric, region, q)] for q in QUARTILES
                                             if quartile_key(EVAL, metric, region, q) in metrics}}
    return row


def evaluation_text(table: dict[str, Any]) -> str:
    """The per-site table as the terminal shows it: cases and mean Dice per region, the federation last."""
    rows = [*table["sites"].items(), *([("federation", table["federation"])] if table["federation"] else [])]
    lines = [f"{'site':<12} {'cases':>5} " + " ".join(f"{'Dice ' + c:>10}" for c in COLUMNS)]
    for name, row in rows:
        cells = " ".join(f"{(row.get(f'dice_{c.lower()}') or {}).get('mean', float('nan')):>10.3f}" for c in COLUMNS)
        lines.append(f"{name:<12} {row.get('cases') or 0:>5.0f} {cells}")
    return "\n".join(lines)


def heatmap_png(table: dict[str, Any]) -> bytes:
    """Mean Dice per site (rows, the federation last) and region (columns)."""
    rows = {**table["sites"], **({"federation": table["federation"]} if table["federation"] else {})}
    values = {name: {c if c != MEAN else "mean": (row.get(f"dice_{c.lower()}") or {}).get("mean", float("nan"))
                     for c in COLUMNS} for name, row in rows.items()}
    return score_heatmap(values, "Dice (BraTS convention), mean over each site's cases")


def score_heatmap(values: dict[str, dict[str, float]], title: str) -> bytes:
    """A PNG of {row: {column: score}} (Dice, recall, accuracy) on a 0-1 scale, each cell labelled with its value
    (missing: blank)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(values)
    columns = list(dict.fromkeys(c for row in values.values() for c in row))
    grid = [[values[n].get(c, float("nan")) for c in columns] for n in names]
    fig, ax = plt.subplots(figsize=(1.1 * len(columns) + 2.6, 0.55 * len(names) + 1.4))
    image = ax.imshow(grid, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(columns)), columns)
    ax.set_yticks(range(len(names)), names)
    for i, line in enumerate(grid):
        for j, value in enumerate(line):
            if value == value:  # not NaN
                ax.text(j, i, f"{value:.3f}", ha="center", va="center", color="white" if value < 0.6 else "black")
    ax.set_title(title)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _spread(value: dict[str, float] | None, digits: int) -> str:
    """A mean, with the median [q1, q3] beneath where the site sent them."""
    if not value:
        return cell(None, digits)
    detail = (f"{value['median']:.{digits}f} [{value['q1']:.{digits}f}, {value['q3']:.{digits}f}]"
              if "median" in value else "")
    return cell(value["mean"], digits, detail)


def provenance(model: dict[str, Any]) -> list[tuple[str, object]]:
    """The model's file, digest, what the job says it was made with, and the run that made it."""
    made_by = model.get("made_by") or {}
    made_with = [(k, v) for k, v in model.items() if k not in ("path", "sha256", "made_by") and v is not None]
    return [("file", model.get("path")), ("sha256", model.get("sha256")), *made_with,
            ("made by", f"{made_by.get('results')} ({made_by.get('status')}, {made_by.get('rounds')} rounds)"
             if made_by else "not recorded: no results.json beside the model")]


def site_notes(table: dict[str, Any]) -> list[str]:
    """What each site withheld and why, and the sites that sent no result, as escaped list items."""
    notes = [f"<b>{text(site)}</b>: {text(what)}: {text(why)}"
             for site, withheld in sorted(table["withheld"].items()) for what, why in sorted(withheld.items())]
    outcomes = table["outcomes"]
    return notes + [f"<b>{text(site)}</b>: no result ({text(outcomes.get(site, 'no answer'))})"
                    for site in table["no_result"]]


def status_line(table: dict[str, Any]) -> str:
    return text(table["status"]) + (f": {text(table['error'])}" if table["error"] else "")


def page(table: dict[str, Any], heatmap: bytes) -> str:
    """The HTML page: nothing in it is fetched or run."""
    head = ["site", "cases", *(f"Dice {c}" for c in COLUMNS), "HD95 mean (mm)", "lesion-wise Dice mean",
            "lesion-wise HD95 mean (mm)"]
    rows = []
    for name, row in [*table["sites"].items(), *([("federation", table["federation"])] if table["federation"] else [])]:
        cells = [cell(row.get("cases"), 0), *(_spread(row.get(f"dice_{c.lower()}"), 3) for c in COLUMNS),
                 _spread(row.get("hd95_mean"), 1), _spread(row.get("lesion_dice_mean"), 3),
                 _spread(row.get("lesion_hd95_mean"), 1)]
        rows.append((name, cells))
    return evaluation_page(
        "Model evaluation across sites", table,
        "Each site scored the model on its own labelled cases (BraTS 2023 procedure); only the values below left "
        "the sites. A cell holds the mean over the site's cases and, where the site sent them, the median [first, "
        "third quartile]; the federation row is the mean over every case scored.",
        html_table(head, rows, total="federation"), image(heatmap, "Dice per site and region"),
        after=[f"<p>Per-case rows (pseudonymised) came from: {text(', '.join(table['case_rows']) or 'no site')}.</p>"])


def evaluation_page(title: str, table: dict[str, Any], intro: str, scores: str, heatmap: str,
                    before_withheld: Sequence[str] = (), after: Sequence[str] = ()) -> str:
    """An evaluation's page: the job's status and what the scores are (`intro`, plain text), the model's
    provenance, the per-site `scores` table and its `heatmap` (HTML fragments), then what each site withheld."""
    return document(title, [
        f"<p>Job status: {status_line(table)}. {text(intro)}</p>",
        "<h2>Model</h2>", definitions(provenance(table["model"])),
        "<h2>Scores per site</h2>", scores, heatmap, *before_withheld,
        "<h2>What sites withheld</h2>",
        bullets(site_notes(table), "nothing: every site sent every value the job asked for"), *after])


def write_report(results: dict[str, Any], out: Path) -> list[Path]:
    """evaluation.html, evaluation.json and evaluation.png (the heatmap) in `out`."""
    table = summary(results)
    heatmap = heatmap_png(table)
    return write_files(out, page(table, heatmap), table, heatmap)


def write_files(out: Path, html: str, table: dict[str, Any], heatmap: bytes, stem: str = "evaluation") -> list[Path]:
    """A report's three files in `out`: the page, its data as JSON and the heatmap alone (`stem`.html, .json,
    .png)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.html", out / f"{stem}.json", out / f"{stem}.png"]
    paths[0].write_text(html)
    paths[1].write_text(json.dumps(table, indent=2))
    paths[2].write_bytes(heatmap)
    return paths
