"""Read the `results.json` of finished PLayer-FL runs, as the server wrote them (server_app/playerfl.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server_app.results import RESULTS_FILE


@dataclass(frozen=True)
class Run:
    method: str
    seed: int
    evaluation: dict[str, dict[str, float]]
    summary: dict[str, float]
    split: dict[str, Any] | None
    source: Path
    cross_site: dict[str, Any] | None = None
    """The run's personalised-against-global matrix (cross_site_evaluation), if it has one."""

    def site_scores(self, score: str) -> dict[str, float]:
        return {site: values[score] for site, values in self.evaluation.items()}


def _results_files(paths: Iterable[Path]) -> list[Path]:
    files = []
    for path in map(Path, paths):
        found = sorted(path.rglob(RESULTS_FILE)) if path.is_dir() else [path]
        if not found:
            raise FileNotFoundError(f"{path}: no {RESULTS_FILE} below this folder")
        files += found
    return files


def load_runs(paths: Iterable[Path]) -> list[Run]:
    """Every finished PLayer-FL run in `paths` (results.json files or folders searched for them)."""
    runs = []
    for file in _results_files(paths):
        record = json.loads(file.read_text())
        job = record.get("job", {})
        if job.get("workflow") != "playerfl":
            raise ValueError(f"{file}: not a PLayer-FL run (workflow {job.get('workflow')!r})")
        if record.get("status") != "finished":
            raise ValueError(f"{file}: the run did not finish (status {record.get('status')!r}, "
                             f"error {record.get('error')!r})")
        split = next((r["split"] for r in record["rounds"] if "split" in r), None)
        runs.append(Run(job["method"], int(job["seed"]), record["evaluation"], record["summary"], split, file,
                        record.get("cross_site")))
    duplicates = sorted({(r.method, r.seed) for r in runs
                         if sum((r.method, r.seed) == (o.method, o.seed) for o in runs) > 1})
    if duplicates:
        raise ValueError(f"several runs for (method, seed) {duplicates}; pass each run once")
    return runs
