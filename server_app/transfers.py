"""What each site's link carried, per round: bytes to and from the site and the time the transfers took.

A FLARE component of the server's job, fed by FLARE's own events, so it needs nothing from the workflows:

- `AFTER_TASK_DATA_FILTER` (the site fetched a task): the time, the task's round and the bytes of its arrays as
  they leave, after the job's filters (the secure-aggregation relay keeps only the site's own ciphertexts);
- `BEFORE_TASK_RESULT_FILTER` (the site's answer is in, its arrays downloaded by the server): the time, the
  bytes of the answer's arrays, what it carried (each array's dtype and shape, its meta's keys; no value), and the
  seconds the site spent on the task, which the site's `TaskClock` (site_agent.tasks.transfers) puts in the answer's
  header.

The transfer time is the server's time from fetch to answer less the site's own time on the task: the model's
download to the site plus the answer's upload to the server (and FLARE's message overhead), no clock shared between
server and site. A site whose transfers keep failing is named, with the reason and the useful rate its link gave:

- FLARE's byte streamer gave up on a stream to the site ("retry failed after 60.00 seconds": the site acknowledged
  too slowly, the pieces were re-sent until FLARE stopped): its error, in this process's log, is the only signal,
  so the meter listens to that logger for the run. After `FAILED_STREAMS` such errors the site is named with how
  much of its task it had not received in how long;
- or the site fetched the same task again (it asked anew after a failed download), `FAILED_FETCHES` times.

Every row and every failing site goes to `transfers.json` beside results.json as it happens.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from nvflare.apis.dxo import from_shareable
from nvflare.apis.event_type import EventType
from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable
from nvflare.app_common.app_constant import AppConstants

from fl_contract.transfers import SITE_TASK_SECONDS

TRANSFERS_FILE = "transfers.json"
METER_ID = "transfer_meter"  # the component id every job gives the meter (jobs.common); the workflow finds it by it
FAILED_FETCHES = 2
"""A site that had to fetch one task this many times more (each a failed download) is named as failing."""
FAILED_STREAMS = 2
"""A site to which FLARE's byte streamer gave up this many streams (a download answer each) is named as failing."""
STREAM_LOGGER = "nvflare.fuel.f3.streaming.byte_streamer"
_STREAM_FAILED = re.compile(r"Tx\[SID:\S+ to ([^.\s\]]+)\S* for \S+\] seq \d+ retry failed after ([\d.]+) seconds")


def carried(shareable: Shareable) -> dict[str, Any]:
    """What an answer carried, never a value: each array's dtype and shape by name, and its meta's keys (the evidence
    that a masked run's answers hold no model parameter and no sample count in the clear; docs/wire.md)."""
    try:
        dxo = from_shareable(shareable)
    except (ValueError, TypeError, KeyError):
        return {"arrays": {}, "meta": []}
    arrays = {name: f"{value.dtype}{list(value.shape)}" for name, value in (dxo.data or {}).items()
              if isinstance(value, np.ndarray)}
    return {"arrays": arrays, "meta": sorted(str(key) for key in (dxo.meta or {}))}


def array_bytes(shareable: Shareable | None) -> int:
    """Bytes of the arrays a task or an answer carries (what FLARE's download moves; headers are a few KB)."""
    if shareable is None:
        return 0
    try:
        data = from_shareable(shareable).data or {}
    except (ValueError, TypeError, KeyError):  # a reply without a DXO (an error code)
        return 0
    return sum(int(v.nbytes) for v in data.values() if isinstance(v, np.ndarray))


def mbit_s(n_bytes: int, seconds: float) -> float:
    return n_bytes * 8 / seconds / 1e6 if seconds > 0 else 0.0


@dataclass
class Transfer:
    """One task of one site: what went to it and back, and how long that took."""

    site: str
    task: str
    round: int
    bytes_to_site: int
    fetches: int = 1
    bytes_from_site: int = 0
    seconds: float | None = None  # None until the answer is in
    site_seconds: float | None = None
    answer: dict[str, Any] | None = None  # what the answer carried: its arrays' dtypes and shapes, its meta's keys
    fetched_at: list[float] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        row = {k: v for k, v in asdict(self).items() if k != "fetched_at" and v is not None}
        if self.seconds is not None:
            row["mbit_s"] = round(mbit_s(self.bytes_to_site + self.bytes_from_site, self.seconds), 3)
        return row

    def failing(self, now: float) -> str | None:
        """Why this transfer keeps failing, or None: fetched FAILED_FETCHES times more than once, no answer."""
        if self.seconds is not None or self.fetches <= FAILED_FETCHES:
            return None
        attempts = [b - a for a, b in zip(self.fetched_at, [*self.fetched_at[1:], now], strict=True)]
        return (f"{self.site} fetched its {self.task} task of round {self.round} {self.fetches} times: each download "
                f"of its {self.bytes_to_site / 1e6:.1f} MB failed and the site asked again; the longest attempt "
                f"lasted {max(attempts):.0f} s, so the link delivered at most "
                f"{mbit_s(self.bytes_to_site, max(attempts)):.2f} Mbit/s (site-agent check measures it; "
                "docs/admin-guide.md#slow-links)")


class _StreamFailures(logging.Handler):
    """FLARE's byte-streamer errors that say a stream to a site was given up, passed to the meter."""

    def __init__(self, meter: TransferMeter):
        super().__init__(logging.ERROR)
        self.meter = meter

    def emit(self, record: logging.LogRecord) -> None:
        match = _STREAM_FAILED.search(record.getMessage())
        if match:
            self.meter.stream_failed(match.group(1), float(match.group(2)))


class TransferMeter(FLComponent):
    """Per site and round, bytes and transfer time of every task (module docstring), in `transfers.json`."""

    def __init__(self) -> None:
        super().__init__()
        self.transfers: dict[str, Transfer] = {}  # by FLARE's task id and site
        self.named: set[str] = set()
        self.stream_failures: dict[str, int] = {}
        self.failing_streams: dict[str, str] = {}
        self.out_dir: Path | None = None
        self.listener = _StreamFailures(self)

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        if event_type == EventType.START_RUN:
            logging.getLogger(STREAM_LOGGER).addHandler(self.listener)
        elif event_type == EventType.END_RUN:
            logging.getLogger(STREAM_LOGGER).removeHandler(self.listener)
        elif event_type == EventType.AFTER_TASK_DATA_FILTER:
            self.fetched(_peer(fl_ctx), fl_ctx.get_prop(FLContextKey.TASK_NAME, ""),
                         fl_ctx.get_prop(FLContextKey.TASK_ID, ""), fl_ctx.get_prop(FLContextKey.TASK_DATA))
            self.out_dir = self.out_dir or _app_dir(fl_ctx)
        elif event_type == EventType.BEFORE_TASK_RESULT_FILTER:
            result = fl_ctx.get_prop(FLContextKey.TASK_RESULT)
            self.answered(_peer(fl_ctx), fl_ctx.get_prop(FLContextKey.TASK_ID, ""), result)
            self.write()

    def fetched(self, site: str, task: str, task_id: str, data: Shareable | None, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        key = f"{task_id}/{site}"
        known = self.transfers.get(key)
        if known is not None:  # the site asks for the same task again: its download failed
            known.fetches += 1
            known.fetched_at.append(now)
            reason = known.failing(now)
            if reason and key not in self.named:
                self.named.add(key)
                self.logger.warning(reason)
            return
        sent_round = data.get_header(AppConstants.CURRENT_ROUND) if data is not None else None
        round_number = int(sent_round) + 1 if sent_round is not None else 0  # 0: a task outside the rounds
        self.transfers[key] = Transfer(site, task, round_number, array_bytes(data), fetched_at=[now])

    def answered(self, site: str, task_id: str, result: Shareable | None, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        transfer = self.transfers.get(f"{task_id}/{site}")
        if transfer is None or result is None:
            return
        site_seconds = result.get_header(SITE_TASK_SECONDS)
        elapsed = now - transfer.fetched_at[-1]
        transfer.bytes_from_site = array_bytes(result)
        transfer.answer = carried(result)
        transfer.site_seconds = None if site_seconds is None else round(float(site_seconds), 3)
        transfer.seconds = round(max(0.0, elapsed - (transfer.site_seconds or 0.0)), 3)

    def stream_failed(self, site: str, retried_s: float, now: float | None = None) -> None:
        """FLARE gave up a stream to `site` after `retried_s` seconds of re-sending; named at FAILED_STREAMS."""
        now = time.monotonic() if now is None else now
        self.stream_failures[site] = count = self.stream_failures.get(site, 0) + 1
        pending = [t for t in self.transfers.values() if t.site == site and t.seconds is None]
        if count < FAILED_STREAMS or site in self.failing_streams or not pending:
            return
        task = pending[-1]
        waited = now - task.fetched_at[0]
        self.failing_streams[site] = (
            f"{site}: FLARE gave up {count} streams of its {task.task} task of round {task.round} (\"retry failed "
            f"after {retried_s:.0f} seconds\": the site acknowledged too slowly and the pieces were re-sent); it has "
            f"not received the task's {task.bytes_to_site / 1e6:.1f} MB in the {waited:.0f} s since it fetched it, "
            f"under {mbit_s(task.bytes_to_site, waited):.2f} Mbit/s of useful data (site-agent check measures the "
            "link; docs/admin-guide.md#slow-links)")
        self.logger.warning(self.failing_streams[site])
        self.write()

    def summary(self, now: float | None = None) -> dict[str, Any]:
        """Every task's row by round and site, and the sites whose transfers keep failing, with the reason."""
        now = time.monotonic() if now is None else now
        rounds: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for transfer in self.transfers.values():
            rounds.setdefault(str(transfer.round), {}).setdefault(transfer.site, []).append(transfer.row())
        failing = {t.site: reason for t in self.transfers.values() if (reason := t.failing(now))}
        return {"rounds": rounds, "failing_sites": {**self.failing_streams, **failing}}

    def write(self) -> None:
        if self.out_dir is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.out_dir / (TRANSFERS_FILE + ".tmp")
        tmp.write_text(json.dumps(self.summary(), indent=1))
        tmp.replace(self.out_dir / TRANSFERS_FILE)


def _peer(fl_ctx: FLContext) -> str:
    peer = fl_ctx.get_peer_context()
    return str(peer.get_identity_name()) if peer is not None else ""


def _app_dir(fl_ctx: FLContext) -> Path:
    """The server app's folder (where results.json is written and the admin's download comes from)."""
    engine = fl_ctx.get_engine()
    workspace = engine.get_workspace()
    return Path(workspace.get_app_dir(fl_ctx.get_job_id()))


def read_transfers(folder: Path) -> dict[str, Any]:
    """transfers.json beside results.json in a job's server app folder ({} when the job had none)."""
    path = Path(folder) / TRANSFERS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def describe(transfers: dict[str, Any]) -> list[str]:
    """Lines for `fl-job submit`: per site, bytes both ways and transfer time over the job, and failing sites."""
    totals: dict[str, list[float]] = {}
    for sites in transfers.get("rounds", {}).values():
        for site, rows in sites.items():
            total = totals.setdefault(site, [0.0, 0.0, 0.0])
            for row in rows:
                total[0] += row.get("bytes_to_site", 0)
                total[1] += row.get("bytes_from_site", 0)
                total[2] += row.get("seconds", 0.0)
    lines = [f"{site}: {to / 1e6:.1f} MB to the site, {back / 1e6:.1f} MB back, {seconds:.0f} s on the network"
             + (f" ({mbit_s(int(to + back), seconds):.2f} Mbit/s)" if seconds else "")
             for site, (to, back, seconds) in sorted(totals.items())]
    lines += [f"transfers failing: {reason}" for reason in transfers.get("failing_sites", {}).values()]
    return lines

