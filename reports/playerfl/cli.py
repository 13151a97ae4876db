"""`playerfl-report RESULTS... --out DIR`: tables (report.md, summary.json) and plots from several runs."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from fl_contract.evaluation import GLOBAL_MODEL
from fl_contract.playerfl.protocol import PERSONALISED
from reports import cross_site as cross_site_report
from reports.playerfl import plots, ranks
from reports.playerfl.runs import Run, load_runs
from reports.playerfl.table import markdown, method_table
from server_app.metrics import INCENTIVE_BASELINES, SCORES

SUMMARY = (f"Median over seeds [lowest, highest seed]; federation scores weighted by training size; fairness = "
           f"variance of the sites' scores (lower is fairer); incentivisation = share of sites strictly better than "
           f"both their Local and their FedAvg result of the same seed (— for {' and '.join(INCENTIVE_BASELINES)}, "
           f"which it compares against).")


def splits_markdown(runs: Sequence[Run]) -> str:
    """Per run that chose or drew a split: the federation's p, each site's own p (PLayer-FL) or what was drawn from,
    and the sites whose curve was left out of the federation's, with the reason."""
    lines = ["| method | seed | federated layers p | sites' own p (PLayer-FL) / drawn from (random) | sites left out |",
             "| --- | ---: | ---: | --- | --- |"]
    for run in sorted((r for r in runs if r.split), key=lambda r: (r.method, r.seed)):
        split = run.split or {}
        detail = split.get("site_splits") or split.get("choices") or ""
        excluded = "; ".join(f"{site}: {reason}" for site, reason in (split.get("excluded_sites") or {}).items())
        lines.append(f"| {run.method} | {run.seed} | {split['federated_layers']} of {len(split['layers'])} | "
                     f"{detail} | {excluded or '—'} |")
    return "\n".join(lines) + "\n"


def cross_site_markdown(runs: Sequence[Run]) -> str:
    """Per run with cross-site evaluation: each site's personalised model against the server's global model, both
    on the site's test split; "" when no run has one."""
    scored = sorted((r for r in runs if r.cross_site), key=lambda r: (r.method, r.seed))
    if not scored:
        return ""
    lines = ["## Personalised against global (cross-site evaluation)", "",
             "Each site's personalised model (scored at home only) and the server's global model, on the site's test "
             "split.", "", "| method | seed | site | balanced accuracy: personalised | global | macro-F1: "
             "personalised | global |", "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for run in scored:
        for site, row in (run.cross_site or {}).get("sites", {}).items():
            cells = [f"{row[model][score]:.3f}" if score in row.get(model, {}) else "—"
                     for score in ("test_balanced_accuracy", "test_macro_f1") for model in (PERSONALISED, GLOBAL_MODEL)]
            lines.append(f"| {run.method} | {run.seed} | {site} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def cross_site_heatmap(run: Run, path: Path) -> Path:
    """The run's personalised-against-global balanced accuracy per site, as fl-eval-report draws it."""
    table = cross_site_report.summary({"cross_site": run.cross_site, "job": {"method": run.method}})
    path.write_bytes(cross_site_report.heatmap_png(table))
    return path


def write_report(runs: Sequence[Run], out_dir: Path) -> Path:
    """Write report.md, summary.json, one per-site bar chart per score, one curve plot per PLayer-FL run and one
    heatmap per run with cross-site evaluation."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table, ranked = method_table(runs), ranks.rankings(runs)
    figures = [plots.site_bars(runs, score, out_dir / f"sites_{score}.png") for score in SCORES]
    figures += [plots.sensitivity_curves(r, out_dir / f"sensitivity_seed{r.seed}.png")
                for r in runs if r.split and r.split.get("federation_curve")]
    figures += [cross_site_heatmap(r, out_dir / f"cross_site_{r.method}_seed{r.seed}.png")
                for r in runs if r.cross_site]
    text = ["# PLayer-FL report", "", f"{len(runs)} runs. {SUMMARY}", "", markdown(table), "## Ranks and tests", "",
            ranks.markdown(ranked), "## Splits", "", splits_markdown(runs), cross_site_markdown(runs),
            *[f"![{f.stem}]({f.name})" for f in figures], ""]
    splits = {f"{r.method} seed {r.seed}": r.split["federated_layers"] for r in runs if r.split}
    excluded = {f"{r.method} seed {r.seed}": r.split["excluded_sites"] for r in runs
                if r.split and r.split.get("excluded_sites")}
    (out_dir / "summary.json").write_text(json.dumps({"methods": table, "ranks": [asdict(r) for r in ranked],
                                                      "splits": splits, "excluded_sites": excluded}, indent=2))
    report = out_dir / "report.md"
    report.write_text("\n".join(text))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="playerfl-report", description=__doc__)
    parser.add_argument("results", nargs="+", type=Path, help="results.json files or folders holding them")
    parser.add_argument("--out", type=Path, required=True, help="folder for report.md, summary.json and the plots")
    args = parser.parse_args(argv)
    print(write_report(load_runs(args.results), args.out))
    return 0
