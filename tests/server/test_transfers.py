"""The transfer meter's accounting from FLARE's own task and answer objects (Shareables made as FLARE makes them):
bytes both ways, the site's own time taken out, a site whose downloads keep failing named with what its link gave."""

from __future__ import annotations

import numpy as np
import pytest
from nvflare.app_common.abstract.fl_model import FLModel
from nvflare.app_common.utils.fl_model_utils import FLModelUtils

from fl_contract.transfers import SITE_TASK_SECONDS
from server_app.transfers import FAILED_FETCHES, TransferMeter, array_bytes, describe

MODEL = {"w": np.zeros((1000, 250), dtype=np.float32), "b": np.zeros(250, dtype=np.float32)}  # 1,001,000 bytes


def _task(round_index: int):
    return FLModelUtils.to_shareable(FLModel(params=MODEL, current_round=round_index, total_rounds=3))


def _answer(site_seconds: float | None):
    answer = FLModelUtils.to_shareable(FLModel(params={"w": MODEL["w"]}, meta={"NUM_STEPS_CURRENT_ROUND": 5}))
    if site_seconds is not None:
        answer.set_header(SITE_TASK_SECONDS, site_seconds)
    return answer


def test_a_round_trip_counts_both_ways_and_leaves_out_the_sites_own_time():
    meter = TransferMeter()
    meter.fetched("site-1", "train", "t1", _task(1), now=100.0)
    meter.answered("site-1", "t1", _answer(site_seconds=30.0), now=138.0)

    [row] = meter.summary(now=140.0)["rounds"]["2"]["site-1"]

    assert row["bytes_to_site"] == 1_001_000 and row["bytes_from_site"] == 1_000_000
    assert row["seconds"] == pytest.approx(8.0) and row["site_seconds"] == 30.0 and row["fetches"] == 1
    assert row["mbit_s"] == pytest.approx(2_001_000 * 8 / 8.0 / 1e6, rel=1e-3)
    assert describe(meter.summary()) == ["site-1: 1.0 MB to the site, 1.0 MB back, 8 s on the network (2.00 Mbit/s)"]


def test_an_answer_without_the_sites_clock_counts_the_whole_round_trip():
    meter = TransferMeter()
    meter.fetched("site-2", "validate", "t2", _task(0), now=0.0)
    meter.answered("site-2", "t2", _answer(site_seconds=None), now=12.5)

    [row] = meter.summary()["rounds"]["1"]["site-2"]
    assert row["seconds"] == 12.5 and "site_seconds" not in row


def test_a_site_that_keeps_fetching_the_same_task_is_named_with_its_links_rate():
    meter = TransferMeter()
    for attempt in range(FAILED_FETCHES + 1):
        meter.fetched("site-3", "train", "t3", _task(0), now=100.0 * attempt)

    failing = meter.summary(now=400.0)["failing_sites"]

    assert set(failing) == {"site-3"}
    reason = failing["site-3"]
    assert f"fetched its train task of round 1 {FAILED_FETCHES + 1} times" in reason
    assert "longest attempt lasted 200 s" in reason and "at most 0.04 Mbit/s" in reason
    assert describe(meter.summary(now=400.0))[-1] == f"transfers failing: {reason}"


def test_one_failed_download_is_not_yet_a_failing_site_and_an_answer_clears_it():
    meter = TransferMeter()
    meter.fetched("site-3", "train", "t4", _task(0), now=0.0)
    meter.fetched("site-3", "train", "t4", _task(0), now=60.0)
    assert meter.summary(now=90.0)["failing_sites"] == {}
    meter.fetched("site-3", "train", "t4", _task(0), now=120.0)
    meter.answered("site-3", "t4", _answer(site_seconds=1.0), now=150.0)

    summary = meter.summary(now=160.0)
    assert summary["failing_sites"] == {} and summary["rounds"]["1"]["site-3"][0]["fetches"] == 3


def test_a_reply_without_arrays_counts_no_bytes():
    from nvflare.apis.shareable import make_reply

    assert array_bytes(make_reply("EXECUTION_EXCEPTION")) == 0 and array_bytes(None) == 0


def _give_up_stream(site: str) -> None:
    """FLARE's byte streamer giving up a stream to the site, as its TxTask logs it (FLARE's own message text)."""
    import logging

    from server_app.transfers import STREAM_LOGGER

    task = (f"Tx[SID:1796136454519937 to {site}.ea862ec8-91f9 for "
            "return_only/download_service__:download_service__download]")
    logging.getLogger(STREAM_LOGGER).error(f"{task} seq 0 retry failed after 60.00 seconds from first retry")


def test_a_site_whose_streams_flare_keeps_giving_up_is_named_while_the_run_listens():
    from nvflare.apis.event_type import EventType
    from nvflare.apis.fl_context import FLContext

    meter = TransferMeter()
    meter.fetched("site-3", "train", "t5", _task(0), now=0.0)
    meter.handle_event(EventType.START_RUN, FLContext())
    try:
        _give_up_stream("site-3")
        assert meter.summary()["failing_sites"] == {}  # one give-up: FLARE's retry may still recover
        _give_up_stream("site-3")
        _give_up_stream("site-1")  # a site without a pending task is not named
    finally:
        meter.handle_event(EventType.END_RUN, FLContext())
    _give_up_stream("site-2")  # after the run: not listened to

    failing = meter.summary()["failing_sites"]
    assert set(failing) == {"site-3"} and meter.stream_failures == {"site-3": 2, "site-1": 1}
    assert "FLARE gave up 2 streams of its train task of round 1" in failing["site-3"]
    assert "not received the task's 1.0 MB" in failing["site-3"] and "Mbit/s of useful data" in failing["site-3"]
