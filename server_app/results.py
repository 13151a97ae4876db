"""What the admin downloads from a job: `results.json` (per-round record) and `global_model.pt` in the server app
folder.

`global_model.pt` (and, for jobs that select a best model, `best_global_model.pt`) is a plain `state_dict` of
tensors, loadable with `torch.load(path, weights_only=True)`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fl_contract.result_files import BEST_MODEL_FILE, GLOBAL_MODEL_FILE, RESULTS_FILE

__all__ = ["BEST_MODEL_FILE", "GLOBAL_MODEL_FILE", "RESULTS_FILE", "RunRecorder", "site_returns"]
RETURNS_KEY = "returns"


def site_returns(rounds: list[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per site, each time it took part again after missing rounds (a restart, an outage): the round it was back
    at and the rounds it missed before it, read from the rounds' `sites` (the sites whose update counted)."""
    sites = sorted({site for r in rounds for site in (*r.get("sites", ()), *r.get("outcomes", {}))})
    returns: dict[str, list[dict[str, Any]]] = {}
    for site in sites:
        missed: list[int] = []
        for entry in rounds:
            if site not in entry.get("sites", ()):
                missed.append(int(entry["round"]))
            elif missed:
                returns.setdefault(site, []).append({"back_at_round": int(entry["round"]), "missed": missed})
                missed = []
    return returns


class RunRecorder:
    """Accumulates the job's record and rewrites it after every round, so a stopped job still leaves its history."""

    def __init__(self, out_dir: Path, job: Mapping[str, Any]):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.record: dict[str, Any] = {"job": dict(job), "rounds": [], "status": "running"}

    def resume(self, rounds: list[dict[str, Any]], completed_rounds: int) -> None:
        """Continue a run interrupted after `completed_rounds`: its rounds so far come from the checkpoint."""
        self.record["rounds"] = list(rounds)
        self.record["resumed_after_round"] = completed_rounds
        self._write()

    def add_round(self, entry: Mapping[str, Any]) -> None:
        self.record["rounds"].append(dict(entry))
        returns = site_returns(self.record["rounds"])
        if returns:
            self.record[RETURNS_KEY] = returns
        self._write()

    def finish(self, status: str, **extra: Any) -> None:
        self.record["status"] = status
        self.record.update(extra)
        self._write()

    def save_model(self, params: Mapping[str, np.ndarray], file_name: str = GLOBAL_MODEL_FILE) -> Path:
        import torch  # here, not at import: job specs read the file names above on the fast command line

        path = self.out_dir / file_name
        torch.save({k: torch.as_tensor(np.asarray(v)) for k, v in params.items()}, path)
        return path

    def _write(self) -> None:
        tmp = self.out_dir / (RESULTS_FILE + ".tmp")
        tmp.write_text(json.dumps(self.record, indent=2))
        tmp.replace(self.out_dir / RESULTS_FILE)
