"""`fl-seg-report`: a downloaded segmentation result -> Dice per site per round as a PNG plot and a markdown table
(and a run's cross-site matrix as a table and heatmap; its page is `fl-eval-report`'s).

Reads only `results.json` (what the admin downloads). "Model round" r is the global model after r aggregation
rounds (0 = the initial model): sites score the model they receive, so round r+1's metrics describe model r, and
the final `validate` task describes the last model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from reports import cross_site as cross_site_report
from server_app.results import RESULTS_FILE

REGIONS = ("tc", "wt", "et", "mean")


def dice_table(results: dict[str, Any]) -> dict[int, dict[str, dict[str, float]]]:
    """{model round: {site: {"tc", "wt", "et", "mean"}}} from every round's and the final validation's site metrics."""
    scored = [(entry["round"] - 1, {s: v["metrics"] for s, v in entry["sites"].items()}) for entry in results["rounds"]]
    final = results.get("final_validation")
    if final:
        scored.append((final["model_round"], final["sites"]))
    table = {}
    for model_round, sites in scored:
        table[model_round] = {site: {r: metrics[f"val_dice_{r}"] for r in REGIONS}
                              for site, metrics in sorted(sites.items()) if "val_dice_mean" in metrics}
    if not any(table.values()):
        raise ValueError("results.json holds no val_dice_* metrics; is it the result of a segmentation job?")
    return table


def _federation_mean(results: dict[str, Any]) -> dict[int, float]:
    """The server's site-weighted selection value per model round."""
    entries = [e.get("selection") for e in results["rounds"]] + [results.get("final_validation", {}).get("selection")]
    return {s["model_round"]: s["value"] for s in entries if s}


def markdown(results: dict[str, Any]) -> str:
    table = dice_table(results)
    sites = sorted({s for row in table.values() for s in row})
    federation = _federation_mean(results)
    lines = ["| model round | " + " | ".join(sites) + " | federation (weighted) |",
             "|---:|" + "---:|" * (len(sites) + 1)]
    for model_round, row in sorted(table.items()):
        cells = [f"{row[s]['mean']:.3f}" if s in row else "-" for s in sites]
        lines.append(
            f"| {model_round} | " + " | ".join(cells) + f" | {federation.get(model_round, float('nan')):.3f} |"
        )
    last = max(table)
    lines += ["", f"Final model (round {last}), Dice per region:", "",
              "| site | TC | WT | ET | mean |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {s} | " + " | ".join(f"{v[r]:.3f}" for r in REGIONS) + " |" for s, v in table[last].items()]
    best = results.get("best_model")
    if best:
        lines += ["", f"Best global model: {best['metric']} {best['value']:.3f} "
                      f"at model round {best['model_round']} ({best['file']})."]
    return "\n".join(lines + _test_lines(results.get("test")) + _cross_site_lines(results.get("cross_site"))) + "\n"


def _cross_site_lines(cross: dict[str, Any] | None) -> list[str]:
    """The cross-site matrix: each site's Dice (mean of TC, WT, ET) of each model on its held-out cases."""
    if not cross or not cross.get("sites"):
        return []
    key, models = f"{cross['split']}_dice_mean", cross["models"]
    lines = ["", f"Cross-site evaluation on the sites' {cross['split']} cases, Dice mean (rows: the site scoring; "
                 "columns: the model, global or the site that trained it):", "",
             "| site | " + " | ".join(models) + " |", "|---|" + "---:|" * len(models)]
    for site, row in cross["sites"].items():
        lines.append(f"| {site} | " + " | ".join(f"{row[m][key]:.3f}" if key in row.get(m, {}) else "-"
                                                 for m in models) + " |")
    lines += [f"- {site}'s model not scored: {why}" for site, why in sorted(cross.get("withheld", {}).items())]
    return lines


def cross_site_plot(results: dict[str, Any], path: Path) -> Path | None:
    """The cross-site Dice matrix as a heatmap, when the run has one."""
    if not cross_site_report.has_cross_site(results):
        return None
    path.write_bytes(cross_site_report.heatmap_png(cross_site_report.summary(results)))
    return path


def _test_lines(test: dict[str, Any] | None) -> list[str]:
    """The selected model on the sites' held-out test cases (BraTS convention): the report to quote."""
    if not test or not test.get("sites"):
        return []
    lines = ["", f"Selected model (round {test['model_round']}) on the test cases, BraTS convention:", "",
             "| site | cases | Dice TC | Dice WT | Dice ET | Dice mean | HD95 mean (mm) | lesion-wise Dice mean | "
             "lesion-wise HD95 mean (mm) |", "|---|---:|" + "---:|" * 7]
    for site, m in sorted(test["sites"].items()):
        dice = " | ".join(f"{m[f'test_dice_{r}']:.3f}" for r in REGIONS)
        lesion_wise = " | ".join(f"{m[key]:{spec}}" if key in m else "-"  # results from before lesion-wise scores
                                 for key, spec in (("test_lesion_dice_mean", ".3f"), ("test_lesion_hd95_mean", ".1f")))
        lines.append(f"| {site} | {m['test_cases']:.0f} | {dice} | {m['test_hd95_mean']:.1f} | {lesion_wise} |")
    federation = test.get("federation")
    if federation:
        lines += ["", f"Federation ({federation['metric']}, weighted by {federation['weight']}): "
                      f"{federation['value']:.3f}."]
    return lines


def plot(results: dict[str, Any], path: Path) -> Path:
    """Mean Dice per site (one line each) and the federation's weighted mean over model rounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = dice_table(results)
    rounds = sorted(table)
    fig, ax = plt.subplots(figsize=(6, 4))
    for site in sorted({s for row in table.values() for s in row}):
        points = [(r, table[r][site]["mean"]) for r in rounds if site in table[r]]
        ax.plot(*zip(*points), marker="o", label=site)
    federation = _federation_mean(results)
    if federation:
        ax.plot(sorted(federation), [federation[r] for r in sorted(federation)], "k--", label="federation (weighted)")
    ax.set_xticks(rounds)
    ax.set(xlabel="model round (aggregations)", ylabel="validation Dice (mean of TC, WT, ET)", ylim=(0, 1))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def load_results(path: Path) -> dict[str, Any]:
    """`results.json`, given the file or any folder above it in a downloaded job result."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.rglob(RESULTS_FILE))
        if len(found) != 1:
            raise SystemExit(f"{path}: expected one {RESULTS_FILE} below it, found {len(found)}; pass the file itself")
        path = found[0]
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: not a readable {RESULTS_FILE} ({exc})") from exc
    if not isinstance(results, dict):
        raise SystemExit(f"{path}: not a {RESULTS_FILE} (a JSON {type(results).__name__}, not an object)")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fl-seg-report", description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="results.json, or the downloaded job folder holding it")
    parser.add_argument("--out", type=Path, default=Path("."),
                        help="folder for dice.png, dice.md and cross_site.png (default: here)")
    args = parser.parse_args(argv)
    results = load_results(args.result)
    if results.get("job", {}).get("workflow") in ("evaluation", "isic-evaluation"):
        raise SystemExit(f"{args.result}: an evaluation job's result; its page is written by fl-eval-report")
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(results)
    (args.out / "dice.md").write_text(text)
    written = [plot(results, args.out / "dice.png"), cross_site_plot(results, args.out / "cross_site.png")]
    print(text + f"\nwrote {args.out / 'dice.md'}, " + ", ".join(str(p) for p in written if p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
