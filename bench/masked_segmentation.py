"""A masked brats-segmentation round against a plain one: time per round and bytes each site sends.

Both jobs run in FLARE's simulator with the same sites, data, seed and SegResNet (the CPU demo's, `CPU_DEMO`), one
after the other, `--repeats` times alternating. Round time is read from the server's log (from "round k/N: sending"
to "round k: aggregated"), bytes from each site's audit log (every
result it sent, serialised as FLARE sends it: the training answer, and with masks the shares, the masked vector and
the unmasking shares). Goals (issue 24): masked <= 1.3x the plain round's time, <= 2.1x its bytes.

    nice -n 19 .venv/bin/python bench/masked_segmentation.py [--sites 3 --rounds 3 --repeats 1]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
from datetime import datetime
from pathlib import Path

from federation_tools.simulate import simulate
from jobs.common import build_job, export
from jobs.segmentation.spec import CPU_DEMO, CPU_DEMO_DATA, KIND, SegmentationParams
from site_agent.data.demo.synthetic_brats import write_brats_site

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*? - round (\d+)(/\d+: sending|: aggregated)")


def round_seconds(server_log: Path) -> list[float]:
    """Seconds of each round: from its "round k/N: sending" line to its "round k: aggregated" line."""
    starts: dict[int, datetime] = {}
    seconds = []
    for line in server_log.read_text(errors="replace").splitlines():
        match = _STAMP.match(line)
        if match:
            stamp, number = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f"), int(match.group(2))
            if match.group(3).endswith("sending"):
                starts[number] = stamp
            elif number in starts:
                seconds.append((stamp - starts[number]).total_seconds())
    return seconds


def bytes_per_round(audit: Path, rounds: int) -> float:
    """Bytes the site sent during the training rounds (the final validate/test answers left out), per round."""
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    sent = [e for e in entries if e.get("event") == "result_sent" and e["task"] not in ("validate", "test")]
    return sum(e["payload_bytes"] for e in sent) / rounds


def run(params: SegmentationParams, sites: list[str], data: Path, work: Path) -> dict[str, float]:
    job = export(build_job(KIND, params), work / "job")
    result = simulate(job, work / "ws", sites, {"brats": str(data / "{site_name}")})
    if result.aborted():
        raise RuntimeError(f"the {'masked' if params.secure_aggregation else 'plain'} job failed: see {work}")
    seconds = round_seconds(result.server_log)[: params.num_rounds]
    sent = [bytes_per_round(result.workspace / site / "local" / "audit_log.jsonl", params.num_rounds) for site in sites]
    return {"round_s": statistics.median(seconds), "bytes_per_site": statistics.mean(sent)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    sites = [f"site-{i}" for i in range(1, args.sites + 1)]
    plain = SegmentationParams(num_rounds=args.rounds, min_clients=args.sites, tracking=False, **CPU_DEMO)
    masked = plain.replace(secure_aggregation=True, update_l2_bound=100.0)
    measured: dict[str, list[dict[str, float]]] = {"plain": [], "masked": []}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        for index, site in enumerate(sites, start=1):
            write_brats_site(data / site, index, **CPU_DEMO_DATA)
        for repeat in range(args.repeats):
            for name, params in (("plain", plain), ("masked", masked)):
                measured[name].append(run(params, sites, data, Path(tmp) / f"{name}-{repeat}"))
    rows = {name: {key: statistics.median(m[key] for m in runs) for key in runs[0]} for name, runs in measured.items()}
    print(f"{args.sites} sites, {args.rounds} rounds, CPU_DEMO SegResNet, FLARE simulator, {args.repeats} repeat(s)\n")
    print("| run | round (s, median) | ratio | bytes sent per site and round | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, row in rows.items():
        print(f"| {name} | {row['round_s']:.1f} | {row['round_s'] / rows['plain']['round_s']:.2f}x | "
              f"{row['bytes_per_site']:,.0f} | {row['bytes_per_site'] / rows['plain']['bytes_per_site']:.2f}x |")


if __name__ == "__main__":
    main()
