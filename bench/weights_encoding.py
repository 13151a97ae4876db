"""brats-segmentation with weights_encoding float32 and float16 side by side: bytes per site and round, Dice.

Both jobs run in FLARE's simulator with the same sites, data and seed and the CPU demo's settings (`CPU_DEMO`,
3 rounds of 2 local epochs, 3 sites), one after the other, for each seed. Bytes come from the server's transfer
meter (results.json: the arrays of each round's train task, to the site and back) and from each site's audit log
(the serialised training answer, as FLARE sends it); Dice from results.json: the final model's validation Dice
(site-weighted mean over the sites' validation cases) and the selected model's test Dice. The last column is the
largest difference between the two runs' final global models, per weight.

    nice -n 19 .venv/bin/python bench/weights_encoding.py [--seeds 0 1 2 --write-readme]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from readme_section import write_section

from federation_tools.simulate import simulate
from fl_contract.segmentation import SELECTION_METRIC, TEST_METRIC
from jobs.common import build_job, export
from jobs.segmentation.spec import CPU_DEMO, CPU_DEMO_DATA, KIND, SegmentationParams
from site_agent.data.demo.synthetic_brats import write_brats_site

SITES = ["site-1", "site-2", "site-3"]
ENCODINGS = ("float32", "float16")


def run(params: SegmentationParams, data: Path, work: Path) -> dict[str, Any]:
    """One job in the simulator: its bytes per site and round, its Dice and its final model."""
    job = export(build_job(KIND, params), work / "job")
    result = simulate(job, work / "ws", SITES, {"brats": str(data / "{site_name}")}, timeout=1800)
    if result.aborted():
        raise SystemExit(f"the {params.weights_encoding} job failed: see {result.server_log}")
    results = json.loads((result.server_app_dir / "results.json").read_text())
    rows = [row for entry in results["rounds"] for site in SITES for row in entry["transfers"][site]
            if row["task"] == "train"]
    sent = []
    for site in SITES:
        audit = result.workspace / site / "local" / "audit_log.jsonl"
        entries = [json.loads(line) for line in audit.read_text().splitlines()]
        sent += [e["payload_bytes"] for e in entries if e.get("event") == "result_sent" and e["task"] == "train"]
    model = torch.load(result.server_app_dir / "global_model.pt", weights_only=True)
    return {"to_site": statistics.mean(r["bytes_to_site"] for r in rows),
            "from_site": statistics.mean(r["bytes_from_site"] for r in rows),
            "payload": statistics.mean(sent),
            "val_dice": results["final_validation"]["selection"]["value"],
            "test_dice": results["test"]["federation"]["value"],
            "model": {k: v.numpy().astype(np.float64) for k, v in model.items()}}


def table(measured: dict[str, list[dict[str, Any]]], seeds: list[int]) -> str:
    plain = measured["float32"]
    largest = max(float(np.max(np.abs(v))) for r in plain for v in r["model"].values())
    lines = [f"{len(SITES)} sites, CPU_DEMO SegResNet ({sum(v.size for v in plain[0]['model'].values()):,} weights, "
             f"the largest |weight| of the float32 final models {largest:.3g}), "
             f"3 rounds of 2 local epochs, FLARE simulator, seeds {', '.join(map(str, seeds))}; "
             f"bytes per site and round (train task), Dice per seed ({SELECTION_METRIC} of the final model, "
             f"{TEST_METRIC} of the selected one)", "",
             "| weights_encoding | arrays to site | arrays from site | ratio | answer as sent (audit log) | "
             f"{SELECTION_METRIC} | {TEST_METRIC} | max abs weight difference from float32 |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for encoding, runs in measured.items():
        first = runs[0]
        difference = max(float(np.max(np.abs(r["model"][k] - p["model"][k])))
                         for r, p in zip(runs, plain, strict=True) for k in p["model"])
        ratio = (first["to_site"] + first["from_site"]) / (plain[0]["to_site"] + plain[0]["from_site"])
        val = " / ".join(f"{r['val_dice']:.4f}" for r in runs)
        test = " / ".join(f"{r['test_dice']:.4f}" for r in runs)
        lines.append(f"| {encoding} | {first['to_site']:,.0f} | {first['from_site']:,.0f} | {ratio:.2f}x | "
                     f"{first['payload']:,.0f} | {val} | {test} | {difference:.2e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--write-readme", action="store_true", help="put the table in bench/README.md")
    args = parser.parse_args()
    measured: dict[str, list[dict[str, Any]]] = {encoding: [] for encoding in ENCODINGS}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        for index, site in enumerate(SITES, start=1):
            write_brats_site(data / site, index, **CPU_DEMO_DATA)
        for seed in args.seeds:
            for encoding in ENCODINGS:
                params = SegmentationParams(num_rounds=3, local_epochs=2, min_clients=len(SITES), tracking=False,
                                            seed=seed, weights_encoding=encoding, **CPU_DEMO)
                measured[encoding].append(run(params, data, Path(tmp) / f"{encoding}-{seed}"))
    text = table(measured, args.seeds)
    print(text)
    if args.write_readme:
        write_section("weights_encoding", text)


if __name__ == "__main__":
    main()
