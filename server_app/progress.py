"""A running job's progress for the admin's `show_stats JOB server` (FLARE's info collector): the rounds done of how
many, when each ended, each site's last outcome, the sites that came back, the sites' validation metrics averaged per
round and the bytes and seconds each site's link carried and took per round.

`fl-job submit` prints a line (a bar on a terminal) per completed round from it, and the study lead's page
(`fl-job status --serve`) draws it; both go through FLARE's own admin command, so they need no port or file of ours on
the server. It is what results.json will hold, reduced: nothing a site did not send.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server_app.results import RETURNS_KEY

PROGRESS_STATS = "hospital_fl_progress"
"""The group of `show_stats JOB server`'s answer that holds the progress (beside FLARE's own `ServerRunner`)."""


def _mean_metrics(sites: Mapping[str, Any]) -> dict[str, float]:
    """Each numeric metric the round's sites reported, averaged over the sites that reported it."""
    values: dict[str, list[float]] = {}
    for site in sites.values():
        for name, value in (site.get("metrics") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                values.setdefault(name, []).append(float(value))
    return {name: sum(v) / len(v) for name, v in values.items()}


def _bytes(transfers: Mapping[str, Any]) -> dict[str, int]:
    return {site: sum(int(row.get("bytes_to_site", 0)) + int(row.get("bytes_from_site", 0)) for row in rows)
            for site, rows in transfers.items()}


def _link_seconds(transfers: Mapping[str, Any]) -> dict[str, float]:
    """Per site, the seconds its round's transfers took on the link (server_app.transfers: fetch to answer, less the
    site's own task time)."""
    return {site: round(sum(float(row.get("seconds") or 0.0) for row in rows), 3) for site, rows in transfers.items()}


def round_progress(record: Mapping[str, Any], num_rounds: int, current_round: int | None,
                   started_at: float) -> dict[str, Any]:
    """The progress of a round-based run from its RunRecorder record (`current_round`: the 1-based round being sent,
    None before the first)."""
    rounds = list(record.get("rounds", []))
    return {
        "num_rounds": num_rounds,
        "completed_rounds": len(rounds),
        "current_round": current_round,
        "started_at": started_at,
        "resumed_after_round": record.get("resumed_after_round"),
        "round_ended_at": [r.get("ended_at") for r in rounds],
        "outcomes": dict(rounds[-1].get("outcomes", {})) if rounds else {},
        "returns": dict(record.get(RETURNS_KEY) or {}),
        "metrics": [_mean_metrics(r.get("sites", {})) for r in rounds],
        "bytes": [_bytes(r.get("transfers", {})) for r in rounds],
        "link_seconds": [_link_seconds(r.get("transfers", {})) for r in rounds],
    }
