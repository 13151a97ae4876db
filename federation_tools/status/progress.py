"""A running job's progress as the admin reads it from `show_stats JOB server` (server_app.progress): rounds done of
how many, the time per round and what is left, each site's last outcome, the validation curves and the bytes per site
and round; `fl-job submit` prints it per round and the study lead's page draws it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server_app.progress import PROGRESS_STATS


@dataclass(frozen=True)
class Progress:
    num_rounds: int
    completed_rounds: int
    current_round: int | None
    round_s: float | None
    """The mean of the completed rounds' durations (the first measured from the run's start)."""
    eta_s: float | None
    outcomes: dict[str, str]
    returns: dict[str, list[dict[str, Any]]]
    curves: dict[str, list[float | None]]
    """Each validation metric the sites report, averaged over the sites per round."""
    bytes: dict[str, list[int]]
    """Per site, the bytes its link carried in each completed round (to the site and back)."""
    link_seconds: dict[str, list[float]]
    """Per site, the seconds those transfers took on its link in each completed round."""

    @property
    def fraction(self) -> float:
        return self.completed_rounds / self.num_rounds if self.num_rounds else 0.0


def _find(stats: Any, key: str) -> dict[str, Any] | None:
    """The group `key` wherever FLARE's answer nests it (by target, then by component)."""
    if not isinstance(stats, dict):
        return None
    if isinstance(stats.get(key), dict):
        return dict(stats[key])
    return next((found for value in stats.values() if (found := _find(value, key)) is not None), None)


def progress_of(stats: dict[str, Any]) -> Progress | None:
    """The server's `show_stats` answer (server_app.progress) as the page and `fl-job submit` show it."""
    info = _find(stats, PROGRESS_STATS)
    if info is None:
        return None
    ended = [float(t) for t in info.get("round_ended_at", []) if t]
    starts = [float(info.get("started_at") or 0.0), *ended[:-1]]
    durations = [b - a for a, b in zip(starts, ended, strict=True) if a] if ended else []
    recent = durations[-5:]
    round_s = sum(recent) / len(recent) if recent else None
    done, total = int(info.get("completed_rounds", 0)), int(info.get("num_rounds", 0))
    metrics: list[dict[str, float]] = info.get("metrics", [])
    names = sorted({name for entry in metrics for name in entry})
    sites = sorted({site for entry in info.get("bytes", []) for site in entry})
    return Progress(
        num_rounds=total, completed_rounds=done, current_round=info.get("current_round"),
        round_s=round_s, eta_s=None if round_s is None else round_s * max(0, total - done),
        outcomes=dict(info.get("outcomes", {})), returns=dict(info.get("returns", {})),
        curves={name: [entry.get(name) for entry in metrics] for name in names},
        bytes={site: [int(entry.get(site, 0)) for entry in info.get("bytes", [])] for site in sites},
        link_seconds={site: [float(entry.get(site, 0.0)) for entry in info.get("link_seconds", [])] for site in sites},
    )


def duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def describe(progress: Progress) -> str:
    """`round 9/300 done, 0.6 s per round, about 3.1 min left`."""
    line = f"round {progress.completed_rounds}/{progress.num_rounds} done"
    if progress.round_s is not None and progress.eta_s is not None:
        line += f", {duration(progress.round_s)} per round, about {duration(progress.eta_s)} left"
    return line


class RoundBar:
    """`fl-job submit`'s progress on a terminal: one bar redrawn in place per completed round (elsewhere, the follower
    prints a line per round)."""

    WIDTH = 30

    def __init__(self, stream: Any):
        self.stream = stream

    def __call__(self, job_id: str, progress: Progress) -> None:
        filled = int(self.WIDTH * progress.fraction)
        self.stream.write(f"\rjob {job_id} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {describe(progress)}\x1b[K")
        self.stream.write("\n" if progress.completed_rounds >= progress.num_rounds else "")
        self.stream.flush()
