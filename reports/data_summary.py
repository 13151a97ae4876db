"""`fl-summary-report`: a downloaded data-summary result -> the page a study's data manager reads before training.

The flags first (what stands between these sites and the planned job), then per feature a table of its cells with
the sites side by side and the federation's pooled count, then the quantiles. A cell a site left out (fewer than its
min_count cases) is shown as "-", never as 0. Reads only `results.json`; the page fetches nothing and runs no
script. `data_summary.json` beside it holds the same data.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fl_contract import data_summary as ds
from reports.html_page import bullets, document, table, text
from reports.segmentation import load_results

PAGE = "data_summary.html"
DATA = "data_summary.json"
BAR_PX = 80
"""Width of a count's bar at the largest count of its feature."""


def is_data_summary(results: Mapping[str, Any]) -> bool:
    return bool((results.get("job") or {}).get("workflow") == "data summary")


def page(results: Mapping[str, Any]) -> str:
    """The whole page as one HTML string: flags first, because they are what an admin acts on before training."""
    sites: dict[str, dict[str, Any]] = results.get("sites", {})
    names = sorted(sites)
    job = results.get("job", {})
    data = str(job.get("data_kind", ds.GLIOMA))
    params = {k: job.get(k) for k in ("data_kind", "dataset", "label_map", "roi_size", "grid", "resample_ras_1mm",
                                      "classes", "dp_noise_multiplier") if k in job}
    flags = [f"<b>{text(f['check'])}</b>: {text(f['message'])}" for f in results.get("flags", [])]
    sections = [
        f"<p>Status {text(results.get('status', ''))}; "
        f"parameters {text(json.dumps(params))}</p>",
        "<h2>Flags</h2>" + bullets(flags, "nothing flagged: the sites' data fit the planned job"),
        "<h2>Sites</h2>" + _overview(sites, results),
    ]
    pooled = results.get("federation", {})
    for feature in ds.features_of(data, job.get("classes", ())):
        sections.append(_feature(feature, sites, names, pooled.get("features", {}).get(feature.name, {})))
    sections.append("<h2>Quantiles</h2><p>Means over each site's cases of its cases' voxel percentiles "
                    "(intensities), or percentiles over its cases (volumes, colours); the federation's is their "
                    "case-weighted mean over the sites that released them.</p>")
    for name in ds.quantile_names(data):
        sections.append(_quantile(name, sites, names, pooled.get("quantiles", {}).get(name)))
    return document(f"Data summary ({data})", sections)


def _overview(sites: Mapping[str, Mapping[str, Any]], results: Mapping[str, Any]) -> str:
    rows = []
    for site, summary in sorted(sites.items()):
        status = ds.released_cells(summary, "case_status")
        dp = summary.get("dp")
        privacy = f"sigma {dp['sigma']:.3g}, epsilon {dp['epsilon']:.3g}" if dp else "none"
        rows.append((site, [f"<td>{ds.cases_released(summary)}</td>", f"<td>{status.get(ds.USABLE, '-')}</td>",
                            f"<td>{summary.get('min_count')}</td>",
                            f"<td>{text(privacy)}</td>"]))
    for site, reason in sorted(results.get("unreadable", {}).items()):
        rows.append((site, [f"<td colspan=4>{text(reason)}</td>"]))
    for site in results.get("no_result", []):
        rows.append((site, ["<td colspan=4>no answer</td>"]))
    return table(["site", "cases released", "usable", "min_count", "DP"], rows)


def _feature(feature: ds.Feature, sites: Mapping[str, Mapping[str, Any]], names: Sequence[str],
             pooled: Mapping[str, Any]) -> str:
    released = {site: sites[site].get("features", {}).get(feature.name, {}) for site in names}
    seen = {c for entry in released.values() for c in entry.get("cells", {})}
    cells = [c for c in feature.cells if c in seen] if feature.cells is not None else sorted(seen)
    peak = max([n for entry in released.values() for n in entry.get("cells", {}).values()] or [1])
    rows = []
    for c in cells:
        row = [_count(entry.get("cells", {}).get(c), peak) for entry in released.values()]
        row.append(f"<td>{pooled.get('cells', {}).get(c, '-')}</td>")
        rows.append((c, row))
    withheld = [f"{site}: {entry['withheld']}" for site, entry in released.items() if "withheld" in entry]
    note = f"<p><small>{text('; '.join(withheld))}</small></p>" if withheld else ""
    body = table(["cell", *names, "federation"], rows) if rows else "<p>no cell released</p>"
    return f"<h3>{text(feature.name)}</h3><p>{text(feature.meaning)}</p>{body}{note}"


def _count(value: int | None, peak: int) -> str:
    if value is None:
        return "<td>-</td>"
    width = max(1, round(BAR_PX * value / peak))
    return (f'<td>{value} <span style="display:inline-block;background:#4a7ab5;height:0.7em;'
            f'width:{width}px"></span></td>')


def _quantile(name: str, sites: Mapping[str, Mapping[str, Any]], names: Sequence[str],
              pooled: Mapping[str, Any] | None) -> str:
    entries = {site: sites[site].get("quantiles", {}).get(name, {}) for site in names}
    at = next((e["at"] for e in entries.values() if "at" in e), None)
    withheld = [f"{site}: {e['withheld']}" for site, e in entries.items() if "withheld" in e]
    note = f"<p><small>{text('; '.join(withheld))}</small></p>" if withheld else ""
    if at is None:
        return f"<h3>{text(name)}</h3><p>not released by any site</p>{note}"
    rows = []
    for i, percentile in enumerate(at):
        row = [f"<td>{e['values'][i]:.4g}</td>" if "values" in e else "<td>-</td>" for e in entries.values()]
        row.append(f"<td>{pooled['values'][i]:.4g}</td>" if pooled else "<td>-</td>")
        rows.append((f"p{percentile}", row))
    counts = ", ".join(f"{site} {e['cases']}" for site, e in entries.items() if "cases" in e)
    return f"<h3>{text(name)}</h3><p>over cases: {text(counts)}</p>" + table(["", *names, "federation"], rows) + note


def write_report(results: Mapping[str, Any], out: Path) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / PAGE).write_text(page(results))
    keep = {k: results.get(k) for k in ("status", "sites", "federation", "flags", "unreadable",
                                        "no_result")}
    (out / DATA).write_text(json.dumps(keep, indent=2, sort_keys=True) + "\n")
    return [out / PAGE, out / DATA]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fl-summary-report", description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="results.json, or the downloaded job folder holding it")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for the page and its data (default: here)")
    args = parser.parse_args(argv)
    results = load_results(args.result)
    if not is_data_summary(results):
        raise SystemExit(f"{args.result}: not a data-summary job's result (workflow "
                         f"{(results.get('job') or {}).get('workflow')!r})")
    paths = write_report(results, args.out)
    for flag in results.get("flags", []):
        print(f"flag: {flag['message']}")
    print(f"{len(results.get('sites', {}))} sites, {len(results.get('flags', []))} flags\nwrote "
          + ", ".join(str(p) for p in paths))
    return 0
