"""The privacy officer's export: exactly the data summary a job would send, before it is sent.

An export folder holds:

    data_summary.json    the summary's JSON text, byte for byte what the job sends (`summary_text`)
    data_summary.txt     the same for people: every released cell and quantile, what was left out and why
    refused_cases.txt    the cases a training job would refuse, with the readers' messages (never sent: it names
                         files)

A job run with `reviewed_summary=<dataset key of this folder>` sends the reviewed data_summary.json instead of reading
the data again, after checking that it was made for the job's parameters and the site's `min_count` now, and that
none of its cells holds fewer cases than that (`read_reviewed`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fl_contract import data_summary as ds
from fl_contract.job_params import DataSummaryParams
from site_agent.summary.release import observe, problems_text, summarise

SUMMARY_FILE = "data_summary.json"
TEXT_FILE = "data_summary.txt"
PROBLEMS_FILE = "refused_cases.txt"


def summary_text(folder: Path, job: DataSummaryParams, min_count: int) -> tuple[str, str]:
    """The summary's JSON text for the site's dataset `folder` and the refused cases' messages (kept at the site)."""
    observations = observe(folder, job)
    return ds.dumps(summarise(observations, job, min_count)), problems_text(observations)


def sha256(text: str) -> str:
    """The summary's fingerprint: in the export's text and in the site's audit log when a job sends it."""
    return hashlib.sha256(text.encode()).hexdigest()


def write_export(folder: Path, text: str, problems: str) -> Path:
    """Write the summary, its description and the refused cases into `folder`; returns the description's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SUMMARY_FILE).write_text(text)
    (folder / PROBLEMS_FILE).write_text(problems or "no case refused\n")
    (folder / TEXT_FILE).write_text(describe(json.loads(text), sha256(text)))
    return folder / TEXT_FILE


def describe(summary: dict[str, Any], digest: str) -> str:
    """What a privacy officer reads before anything is sent."""
    lines = [f"Data summary ({summary['data']}): the only data this site sends in a data-summary job",
             f"  every count holds at least min_count = {summary['min_count']} cases; smaller cells are left out",
             f"  parameters: {json.dumps(summary['params'], sort_keys=True)}"]
    dp = summary.get("dp")
    lines.append(f"  DP: Gaussian noise sigma {dp['sigma']:.4g} on every count ({dp['features']} features, noise "
                 f"multiplier {dp['noise_multiplier']}), epsilon {dp['epsilon']:.4g} at delta {dp['delta']:g}"
                 if dp else "  DP: none (suppression below min_count only)")
    lines.append(f"  {SUMMARY_FILE}: {len(json.dumps(summary))} characters of JSON, sha256 {digest}")
    lines.append("")
    for name, entry in summary["features"].items():
        cells = entry.get("cells")
        shown = "; ".join(f"{cell}: {n}" for cell, n in cells.items()) if cells else \
            entry.get("withheld", "every cell below min_count")
        lines.append(f"  {name:<22} {shown}")
    lines.append("")
    for name, entry in summary["quantiles"].items():
        shown = (f"{entry['cases']} cases, percentiles {entry['at']}: {entry['values']}" if "values" in entry
                 else f"withheld ({entry['withheld']})")
        lines.append(f"  {name:<22} {shown}")
    lines.append("\n  Nothing else leaves: no image, voxel, file name, case or patient ID, date or path.\n")
    return "\n".join(lines)


def read_reviewed(folder: Path, job: DataSummaryParams, min_count: int) -> str:
    """The reviewed summary's text, refused (naming the file and field) unless it was made for this job's parameters
    and the site's current min_count, and no cell in it holds fewer cases than that."""
    path = Path(folder) / SUMMARY_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; write the reviewed export with `site-agent summary export`")
    text = path.read_text()
    try:
        summary = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err}); export it again") from None
    expected = {"format": ds.FORMAT, "params": job.content(), "min_count": min_count}
    wrong = [f"{key} is {summary.get(key)!r}, the job needs {value!r}" for key, value in expected.items()
             if summary.get(key) != value]
    small = [f"{name}/{cell} holds {n}" for name, entry in summary.get("features", {}).items()
             for cell, n in entry.get("cells", {}).items() if not isinstance(n, int) or n < max(min_count, 1)]
    if wrong or small:
        raise ValueError(f"{path}: the reviewed summary does not fit this job and policy: "
                         f"{'; '.join(wrong + small)}. Export again with the job's parameters, review it, or run the "
                         "job without reviewed_summary")
    return text
