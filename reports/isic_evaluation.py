"""An isic-evaluation's results.json as the page a consortium reads: the classifier's provenance, each site's
balanced accuracy, macro-F1 and per-class recall, its confusion matrix with the cells it kept at the site left
empty, a heatmap of recall per site and class, and what each site withheld and why; and the same as JSON.

Balanced accuracy and macro-F1 do not pool from the sites' values (nor does a confusion matrix with suppressed
cells), so the federation's row holds only the images scored; `fl-eval-report` writes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fl_contract.evaluation import CONFUSION, EVAL
from reports.evaluation import evaluation_page, score_heatmap, write_files
from reports.html_page import cell, image, text
from reports.html_page import table as html_table


def is_isic_evaluation(results: dict[str, Any]) -> bool:
    return bool((results.get("job") or {}).get("workflow") == "isic-evaluation")


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """What the page shows, as data: the classifier, one row per site, each site's confusion matrix."""
    confusion = results.get(CONFUSION) or {}
    classes: list[str] = next((c["classes"] for c in confusion.values() if c.get("classes")), [])
    sites = {site: _row(metrics, classes) for site, metrics in sorted((results.get("sites") or {}).items())}
    return {"status": results.get("status"), "error": results.get("error"), "classes": classes,
            "model": results.get("model_identity") or {}, "sites": sites,
            "federation": {"images": (results.get("federation") or {}).get(f"{EVAL}_images")},
            "confusion": dict(sorted(confusion.items())), "withheld": results.get("withheld") or {},
            "no_result": results.get("no_result") or [], "outcomes": results.get("outcomes") or {}}


def _row(metrics: dict[str, float], classes: list[str]) -> dict[str, Any]:
    return {"images": metrics.get(f"{EVAL}_images"), "balanced_accuracy": metrics.get(f"{EVAL}_balanced_accuracy"),
            "macro_f1": metrics.get(f"{EVAL}_macro_f1"),
            "recall": {c: metrics.get(f"{EVAL}_recall_{c.lower()}") for c in classes},
            "images_per_class": {c: metrics.get(f"{EVAL}_images_{c.lower()}") for c in classes}}


def evaluation_text(table: dict[str, Any]) -> str:
    """The per-site table as the terminal shows it."""
    classes = table["classes"]
    lines = [f"{'site':<12} {'images':>6} {'bal. acc.':>9} {'macro-F1':>9} " +
             " ".join(f"{'recall ' + c:>11}" for c in classes)]
    for site, row in table["sites"].items():
        recalls = " ".join(f"{_number(row['recall'][c], 3):>11}" for c in classes)
        lines.append(f"{site:<12} {_number(row['images'], 0):>6} {_number(row['balanced_accuracy'], 3):>9} "
                     f"{_number(row['macro_f1'], 3):>9} {recalls}")
    return "\n".join(lines)


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def heatmap_png(table: dict[str, Any]) -> bytes:
    """Recall per site (rows) and class (columns), balanced accuracy last; a withheld recall is blank."""
    values = {site: {**{c: v for c, v in row["recall"].items() if v is not None},
                     "bal. acc.": row["balanced_accuracy"]} for site, row in table["sites"].items()}
    return score_heatmap(values, "Recall per class and balanced accuracy, each site's images")


def _confusion(site: str, matrix: dict[str, Any]) -> str:
    """One site's confusion matrix: rows the true class, columns the predicted one; an empty cell stayed at the site."""
    classes = matrix.get("classes") or []
    rows = [(f"true {c}", [cell(n, 0) if n is not None else "<td><small>kept</small></td>" for n in counts])
            for c, counts in zip(classes, matrix.get("counts") or [])]
    return f"<h3>{text(site)}</h3>" + html_table(["", *(f"predicted {c}" for c in classes)], rows)


def page(table: dict[str, Any], heatmap: bytes) -> str:
    """The HTML page: nothing in it is fetched or run."""
    classes = table["classes"]
    head = ["site", "images", "balanced accuracy", "macro-F1", *(f"recall {c}" for c in classes)]
    rows = [(site, [cell(row["images"], 0), cell(row["balanced_accuracy"], 3), cell(row["macro_f1"], 3),
                    *(cell(row["recall"][c], 3, f"{row['images_per_class'][c]:.0f} images"
                           if row["images_per_class"][c] is not None else "") for c in classes)])
            for site, row in table["sites"].items()]
    rows.append(("federation", [cell(table["federation"]["images"], 0), *(cell(None, 0) for _ in head[2:])]))
    return evaluation_page(
        "Classifier evaluation across sites", table,
        "Each site scored the classifier on every image of its ISIC-format folder; only the values below left the "
        "sites. A recall, and a confusion-matrix cell, over fewer images than the site's policy's min_cases stayed "
        "at the site (a cell of one or two images is close to one patient's diagnosis). Balanced accuracy and "
        "macro-F1 do not pool from the sites' values: the federation row counts the images scored.",
        html_table(head, rows, total="federation"), image(heatmap, "Recall per site and class"),
        before_withheld=["<h2>Confusion matrices</h2>",
                         *(_confusion(site, m) for site, m in table["confusion"].items())])


def write_report(results: dict[str, Any], out: Path) -> list[Path]:
    """evaluation.html, evaluation.json and evaluation.png (the heatmap) in `out`."""
    table = summary(results)
    heatmap = heatmap_png(table)
    return write_files(out, page(table, heatmap), table, heatmap)
