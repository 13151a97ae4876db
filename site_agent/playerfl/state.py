"""The site's state between rounds, in its own workspace: its model (with the local suffix), Ditto's and pFedMe's
personal model, the best-validation snapshot, and its optimizers' state (one Adam per role, kept across rounds).
Written atomically after every round, one file per round (the last two kept), so a restarted site resumes, and so
does a job the server resumed from an earlier round than the site's last. A site back in its job after a restart
starts the round it is sent from the newest state it saved before it (`latest_state`): its personal layers as it
left them, however many rounds it missed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

StateDict = dict[str, torch.Tensor]
KEEP_ROUNDS = 2


@dataclass
class SiteState:
    model: StateDict
    personal: StateDict | None = None
    best: StateDict | None = None
    best_score: float = float("-inf")
    best_round: int = -1
    optimizers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def offer_snapshot(self, state: StateDict, score: float, round_number: int) -> bool:
        """Keep `state` if its validation score beats the best so far (ties keep the earlier snapshot)."""
        if score <= self.best_score:
            return False
        self.best = {k: v.detach().clone() for k, v in state.items()}
        self.best_score, self.best_round = score, round_number
        return True


def state_folder(workspace_dir: Path, run_id: str) -> Path:
    """Where one job's site state lives (`run_id`: the job's id, or its first run's id when the server resumed it)."""
    return Path(workspace_dir) / "playerfl" / run_id


def state_path(folder: Path, round_number: int) -> Path:
    """The state after the site's training in `round_number` (0-based), which round `round_number + 1` starts from."""
    return folder / f"round-{round_number}.pt"


def save_state(state: SiteState, folder: Path, round_number: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = state_path(folder, round_number)
    tmp = path.with_suffix(".tmp")
    torch.save(vars(state), tmp)
    tmp.replace(path)
    for old in folder.glob("round-*.pt"):
        if int(old.stem.removeprefix("round-")) <= round_number - KEEP_ROUNDS:
            old.unlink()


def latest_state(folder: Path, up_to: int) -> tuple[int, SiteState] | None:
    """The newest state saved after a round at or before `up_to` (0-based), with that round; None when the site has
    none (its first round in this job, or a site that lost its disk)."""
    rounds = sorted((int(p.stem.removeprefix("round-")) for p in Path(folder).glob("round-*.pt")
                     if p.stem.removeprefix("round-").isdigit()), reverse=True)
    for round_number in (r for r in rounds if r <= up_to):
        state = load_state(state_path(folder, round_number))
        if state is not None:
            return round_number, state
    return None


def load_state(path: Path) -> SiteState | None:
    """The saved state, or None before the site's first round of this job."""
    if not path.is_file():
        return None
    try:
        return SiteState(**torch.load(path, weights_only=True, map_location="cpu"))  # loaded onto the model's device
    except Exception as exc:
        raise RuntimeError(f"{path}: the site's PLayer-FL state cannot be read ({exc}); "
                           "delete it to restart this job's site state") from exc
