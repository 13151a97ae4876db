"""The site's state between rounds, in its own workspace: its model (with the local suffix), Ditto's personal
model, and the best-validation snapshot. Rewritten atomically after every round, so a restarted site resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

StateDict = dict[str, torch.Tensor]
STATE_FILE = "playerfl_state.pt"


@dataclass
class SiteState:
    model: StateDict
    personal: StateDict | None = None
    best: StateDict | None = None
    best_score: float = float("-inf")
    best_round: int = -1

    def offer_snapshot(self, state: StateDict, score: float, round_number: int) -> bool:
        """Keep `state` if its validation score beats the best so far (ties keep the earlier snapshot)."""
        if score <= self.best_score:
            return False
        self.best = {k: v.detach().clone() for k, v in state.items()}
        self.best_score, self.best_round = score, round_number
        return True


def state_path(workspace_dir: Path, job_id: str) -> Path:
    return Path(workspace_dir) / "playerfl" / job_id / STATE_FILE


def save_state(state: SiteState, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(vars(state), tmp)
    tmp.replace(path)


def load_state(path: Path) -> SiteState | None:
    """The saved state, or None before the site's first round of this job."""
    if not path.is_file():
        return None
    try:
        return SiteState(**torch.load(path, weights_only=True))
    except Exception as exc:
        raise RuntimeError(f"{path}: the site's PLayer-FL state cannot be read ({exc}); "
                           "delete it to restart this job's site state") from exc
