"""`fl-eval-report`: a downloaded evaluation result -> the page a consortium reads, its data as JSON and its heatmap.

A brats-evaluation or isic-evaluation result gives evaluation.html/.json/.png (the model's provenance, the per-site
table, what each site withheld and why); a training run with cross-site evaluation gives cross_site.html/.json/.png
(the sites x models matrix per metric). Reads only `results.json`; the pages fetch nothing and run no script.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reports import cross_site, evaluation, isic_evaluation
from reports.segmentation import load_results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fl-eval-report", description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="results.json, or the downloaded job folder holding it")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for the page and its files (default: here)")
    args = parser.parse_args(argv)
    results = load_results(args.result)
    if evaluation.is_evaluation(results):
        paths = evaluation.write_report(results, args.out)
        shown = evaluation.evaluation_text(evaluation.summary(results))
    elif isic_evaluation.is_isic_evaluation(results):
        paths = isic_evaluation.write_report(results, args.out)
        shown = isic_evaluation.evaluation_text(isic_evaluation.summary(results))
    elif cross_site.has_cross_site(results):
        paths = cross_site.write_report(results, args.out)
        shown = f"cross-site evaluation of {', '.join(results['cross_site']['models'])}"
    else:
        raise SystemExit(f"{args.result}: neither an evaluation job's result nor a run with cross-site evaluation "
                         "(submit brats-segmentation with --cross-site-evaluation, or a brats-evaluation or "
                         "isic-evaluation job)")
    print(shown + "\nwrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
