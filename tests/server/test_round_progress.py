"""A running job's progress, from the round workflow's record (server_app.progress) to what the admin reads
(federation_tools.status.progress): rounds done, the time per round from the rounds' ends, what is left, the curves
and the bytes and link seconds per site, and `fl-job submit`'s bar on a terminal."""

from __future__ import annotations

import io

import pytest

from federation_tools.status.progress import RoundBar, describe, progress_of
from server_app.progress import PROGRESS_STATS, round_progress


def _round(number: int, ended_at: float) -> dict:
    return {"round": number, "ended_at": ended_at, "outcomes": {"site-1": "update accepted", "site-2": "no answer"},
            "sites": {"site-1": {"metrics": {"val_dice_mean": 0.1 * number, "note": "text"}},
                      "site-2": {"metrics": {"val_dice_mean": 0.3 * number}}},
            "transfers": {"site-1": [{"bytes_to_site": 100, "bytes_from_site": 50, "seconds": 0.5},
                                     {"bytes_to_site": 10, "bytes_from_site": 5, "seconds": None}]}}


def test_progress_counts_rounds_times_curves_and_bytes_from_the_record() -> None:
    record = {"rounds": [_round(1, 110.0), _round(2, 130.0), _round(3, 150.0)],
              "returns": {"site-2": [{"back_at_round": 3, "missed": [2]}]}}

    info = round_progress(record, num_rounds=10, current_round=4, started_at=100.0)
    seen = progress_of({"server": {"ServerRunner": {}, PROGRESS_STATS: info}})  # nested as FLARE answers it

    assert seen is not None and (seen.completed_rounds, seen.num_rounds, seen.current_round) == (3, 10, 4)
    assert seen.round_s == pytest.approx((10 + 20 + 20) / 3)  # the first round from the run's start
    assert seen.eta_s == pytest.approx(seen.round_s * 7)
    assert seen.curves == {"val_dice_mean": pytest.approx([0.2, 0.4, 0.6])}  # numbers only, mean over the sites
    assert seen.bytes == {"site-1": [165, 165, 165]} and seen.link_seconds == {"site-1": [0.5, 0.5, 0.5]}
    assert seen.outcomes["site-2"] == "no answer" and seen.returns["site-2"][0]["back_at_round"] == 3
    assert describe(seen) == "round 3/10 done, 16.7 s per round, about 1.9 min left"


def test_no_progress_before_a_round_or_without_the_group() -> None:
    assert progress_of({"server": {"ServerRunner": {"status": "started"}}}) is None
    empty = progress_of({PROGRESS_STATS: round_progress({"rounds": []}, 5, None, 100.0)})
    assert empty is not None and empty.round_s is None and describe(empty) == "round 0/5 done"


def test_the_terminal_bar_is_redrawn_in_place_and_ends_with_a_newline() -> None:
    out = io.StringIO()
    bar = RoundBar(out)
    for done in (1, 2):
        info = round_progress({"rounds": [_round(n, 100.0 + 10 * n) for n in range(1, done + 1)]}, 2, None, 100.0)
        seen = progress_of({PROGRESS_STATS: info})
        assert seen is not None
        bar("job-1", seen)

    first, second = out.getvalue().split("\r")[1:]
    assert first.startswith("job job-1 [" + "#" * 15 + "." * 15 + "] round 1/2 done") and "\n" not in first
    assert second.startswith("job job-1 [" + "#" * 30 + "] round 2/2 done") and second.endswith("\n")
