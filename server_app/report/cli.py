"""`playerfl-report RESULTS... --out DIR`: table (report.md, summary.json) and plots from several runs."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from server_app.metrics import SCORES
from server_app.report import plots
from server_app.report.runs import Run, load_runs
from server_app.report.table import markdown, method_table


def write_report(runs: Sequence[Run], out_dir: Path) -> Path:
    """Write report.md, summary.json, one per-site bar chart per score and one curve plot per PLayer-FL run."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = method_table(runs)
    figures = [plots.site_bars(runs, score, out_dir / f"sites_{score}.png") for score in SCORES]
    figures += [plots.sensitivity_curves(r, out_dir / f"sensitivity_seed{r.seed}.png")
                for r in runs if r.split and "site_curves" in r.split]
    splits = {f"{r.method} seed {r.seed}": r.split["federated_layers"] for r in runs if r.split}
    text = ["# PLayer-FL report", "",
            f"{len(runs)} runs. Median over seeds [bootstrap 95% interval]; federation scores weighted by training size; "
            "fairness = variance across sites (lower is fairer); incentivisation = share of sites strictly better than "
            "both their Local and FedAvg result of the same seed.", "", markdown(table),
            "Layers federated: " + (", ".join(f"{k}: {v}" for k, v in sorted(splits.items())) or "none"), "",
            *[f"![{f.stem}]({f.name})" for f in figures], ""]
    (out_dir / "summary.json").write_text(json.dumps({"methods": table, "splits": splits}, indent=2))
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
