"""The admin's side through the FLARE API: submit a job folder, follow it, download its results.

Following survives a server restart: the FLARE API raises `NoConnection` (or finds its session closed) while the
server is away, and the follower reconnects with the same admin kit, then follows the job to the copy the server
resumed it as (`resumed_as` in the original's meta). While a job waits to start, it prints why, from the server
scheduler's latest entry (with our server kit it names the sites that are not connected).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from nvflare.fuel.flare_api.api_spec import NoConnection, SessionClosed
from nvflare.fuel.flare_api.flare_api import Session, new_secure_session

from federation_tools.status.progress import Progress, describe, progress_of
from server_app.recovery import REASON_KEY, RESUMED_AS_KEY
from server_app.rejoin import SITE_RETURNS_KEY
from server_app.results import RESULTS_FILE, RETURNS_KEY

COMPLETED = "FINISHED:COMPLETED"
FAILED_TO_RUN = "FINISHED:FAILED_TO_RUN"
DEPLOY_DETAIL = "job_deploy_detail"
DEPLOY_DETAIL_WAIT_S = 5.0
"""FLARE marks a job it could not start FAILED_TO_RUN and only then writes why (each site's answer to the deploy) in
a second update of the meta: how long the follower reads the meta again for it (it follows within milliseconds; a
follower that read between the two saw the status alone, under the suite's load)."""
DOWNLOADABLE = (COMPLETED, "FINISHED:ABORTED", "FINISHED:EXECUTION_EXCEPTION")
WAITING = ("SUBMITTED", "DISPATCHED")
STATS_EVERY_S = 3.0
"""How often the follower asks a running job's server process for its progress (one admin command each time)."""
RECONNECT_WINDOW_S = 300.0
"""How long the follower tries to reconnect to a server that went away (a restart takes seconds to a minute)."""
LOST = (NoConnection, SessionClosed)  # SessionExpired is a SessionClosed
RoundsSeen = Callable[[str, Progress], None]
"""Told (job id, progress) each time a running job has completed another round."""
T = TypeVar("T")


@dataclass(frozen=True)
class JobOutcome:
    job_id: str
    status: str
    meta: dict[str, Any]
    result_dir: Path | None

    @property
    def completed(self) -> bool:
        return self.status == COMPLETED

    def server_app_dir(self) -> Path:
        if self.result_dir is None:
            raise RuntimeError(f"job {self.job_id} has no downloaded results (status {self.status})")
        return self.result_dir / "workspace" / "app_server"

    def results(self) -> dict[str, Any]:
        """The workflow's results.json when it was downloaded (empty otherwise)."""
        path = self.result_dir / "workspace" / "app_server" / RESULTS_FILE if self.result_dir else None
        return dict(json.loads(path.read_text())) if path is not None and path.is_file() else {}

    def refusal(self) -> str:
        """Why the job did not finish: the workflow's own reason (naming each site's outcome) when it recorded one,
        and what FLARE recorded in the job meta (refusals at deploy, failed sites)."""
        keys = (DEPLOY_DETAIL, "failed_clients", "status")
        reasons = [str(self.results()["error"])] if self.results().get("error") else []
        waited = waiting_reason(self.meta)
        reasons += [f"the scheduler's last word: {waited}"] if waited else []
        return "; ".join(reasons + [f"{k}: {self.meta[k]}" for k in keys if self.meta.get(k)])


def waiting_reason(meta: dict[str, Any]) -> str:
    """The scheduler's latest reason for not starting the job (FLARE's entries read 'YYYY-mm-dd HH:MM:SS: reason')."""
    history = meta.get("schedule_history") or []
    if not isinstance(history, list) or not history:
        return ""
    last = str(history[-1])
    return last[21:] if last[19:21] == ": " else last


class Reconnecting:
    """The admin's session, replaced by a new one (same user, same kit) when the server goes away and comes back.

    The caller keeps owning the session it passed in; `close_own` closes the ones made here."""

    def __init__(self, session: Session, say: Callable[[str], None], window: float = RECONNECT_WINDOW_S):
        self.session = session
        self.say = say
        self.window = window
        self._own: list[Session] = []

    def run(self, command: Callable[..., T], *args: Any) -> T:
        """`command(session, *args)` on the current session, reconnecting and trying again when the server is away."""
        while True:
            try:
                return command(self.session, *args)
            except LOST as exc:
                self._reconnect(exc)

    def _reconnect(self, lost: Exception) -> None:
        """Log in again until the window passes. FLARE 2.9's login fails in more ways than a lost connection while
        the server starts (its identity challenge answered before its credentials are loaded: a TypeError inside
        FLARE's authenticator, seen in a CI run), so every failure is retried; the last one is named at the end."""
        self.say(f"lost the connection to the server ({lost}); reconnecting for up to {self.window:.0f} s")
        deadline = time.monotonic() + self.window
        while True:
            try:
                session = new_secure_session(self.session.username, self.session.startup_path,
                                             timeout=max(1.0, min(30.0, deadline - time.monotonic())))
            except Exception as exc:  # noqa: BLE001 - a login in the server's start-up window fails in FLARE's own ways
                if time.monotonic() > deadline:
                    raise ConnectionError(f"the server did not come back within {self.window:.0f} s ({exc}); the job "
                                          "goes on if the server does: follow it again with its job id") from exc
                time.sleep(2.0)
                continue
            self._own.append(session)
            self.session = session
            self.say("reconnected to the server")
            return

    def close_own(self) -> None:
        for session in self._own:
            try:
                session.close()
            except Exception:  # a session to a server that went away again: nothing left to close
                pass


def submit_and_wait(session: Session, job_dir: Path, timeout: float = 600.0, download: bool = True,
                    progress: Callable[[str], None] | None = print, rounds: RoundsSeen | None = None) -> JobOutcome:
    job_id = session.submit_job(str(job_dir))
    (progress or (lambda _: None))(f"submitted {Path(job_dir).name} as job {job_id}")
    return follow_job(session, job_id, timeout, download, progress, rounds=rounds)


def follow_job(session: Session, job_id: str, timeout: float = 600.0, download: bool = True,
               progress: Callable[[str], None] | None = print,
               reconnect_window: float = RECONNECT_WINDOW_S, rounds: RoundsSeen | None = None) -> JobOutcome:
    """Wait for the job to finish, saying why while it waits to start, reconnecting when the server restarts and
    following the job to the copy the server resumed it as; download what it left (results.json records the
    completed rounds and the reason of an early stop). While it runs, each completed round goes to `rounds`
    (default: a line to `progress`; neither given: the server is not asked)."""
    say = progress or (lambda _: None)
    if rounds is None and progress is not None:
        rounds = _round_lines(say)
    link = Reconnecting(session, say, reconnect_window)
    try:
        job_id, status, meta = _follow(link, job_id, timeout, say, rounds)
        result_dir = link.run(_download, job_id) if download and status in DOWNLOADABLE else None
    finally:
        link.close_own()
    outcome = JobOutcome(job_id, status, meta, result_dir)
    for line in return_lines(outcome.results()):
        say(f"job {job_id}: {line}")
    return outcome


def _round_lines(say: Callable[[str], None]) -> RoundsSeen:
    """A line per completed round: `job ID: round 9/300 done, 0.6 s per round, about 3.1 min left`."""
    def tell(job_id: str, seen: Progress) -> None:
        say(f"job {job_id}: {describe(seen)}")
    return tell


def return_lines(results: dict[str, Any]) -> list[str]:
    """One line per time a site took part again after missing rounds: "site-2 back at round 5 (missed 3, 4)"."""
    return [f"{site} back at round {back['back_at_round']} (missed {', '.join(str(r) for r in back['missed'])})"
            for site, backs in sorted((results.get(RETURNS_KEY) or {}).items()) for back in backs]


def _follow(
    link: Reconnecting, job_id: str, timeout: float, say: Callable[[str], None], rounds: RoundsSeen | None = None
) -> tuple[str, str, dict[str, Any]]:
    """Polls the job's meta through a session that reconnects, so it rides out a server restart; says once why a waiting
    job has not started, says when a site that restarted is back in the job (or why not), follows a job that recovery
    resumed under a new id, and aborts a job that runs past the timeout rather than leave it running unattended."""
    last_status, last_wait, returns_told = None, "", 0
    rounds_seen, stats_at = 0, 0.0
    deadline = time.monotonic() + timeout
    while True:
        meta = link.run(Session.get_job_meta, job_id)
        status = meta.get("status", "")
        if status != last_status:
            say(f"job {job_id}: {status}")
            last_status = status
            stats_at = time.monotonic()  # the first `show_stats` a poll later: FLARE errs on a job process starting
        if rounds is not None and status == "RUNNING" and time.monotonic() - stats_at > STATS_EVERY_S:
            stats_at = time.monotonic()
            seen = _progress(link, job_id)
            if seen is not None and seen.completed_rounds > rounds_seen:
                rounds_seen = seen.completed_rounds
                rounds(job_id, seen)
        returns = meta.get(SITE_RETURNS_KEY) or []
        for back in returns[returns_told:]:  # the server's main process writes one entry per returning site
            say(f"job {job_id}: {back.get('site')} registered again: {back.get('detail')}")
        returns_told = len(returns)
        wait = waiting_reason(meta) if status in WAITING else ""
        wait = "" if wait == "scheduled" else wait  # FLARE's entry once it dispatches the job
        if wait and wait != last_wait:
            say(f"job {job_id}: waiting to start: {_with_connected_sites(link, wait)}")
        last_wait = wait
        if status.startswith("FINISHED") and meta.get(RESUMED_AS_KEY):
            say(f"job {job_id}: {meta.get(REASON_KEY, 'interrupted')}; resumed as job {meta[RESUMED_AS_KEY]}")
            job_id, last_status, returns_told = str(meta[RESUMED_AS_KEY]), None, 0
            continue
        if status.startswith("FINISHED"):
            return job_id, status, _with_deploy_detail(link, job_id, meta)
        if time.monotonic() > deadline:
            link.run(Session.abort_job, job_id)
            raise TimeoutError(f"job {job_id} did not finish within {timeout:.0f} s (last status {status}); "
                               "it was aborted")
        time.sleep(1.0)


def _progress(link: Reconnecting, job_id: str) -> Progress | None:
    """The running job's progress from the server's `show_stats` (server_app.progress), or None: a job whose server
    process is starting or ending answers without it, and a kind without rounds never has it."""
    try:
        return progress_of(link.run(Session.show_stats, job_id, "server"))
    except Exception:  # noqa: BLE001 - FLARE answers a job it has not started yet with an error of its own
        return None


def _with_deploy_detail(link: Reconnecting, job_id: str, meta: dict[str, Any]) -> dict[str, Any]:
    """The meta of a finished job; for one FLARE failed to run, read again until it says why (FLARE writes the deploy
    detail just after the status) or DEPLOY_DETAIL_WAIT_S passes (a job refused before any deploy has none)."""
    deadline = time.monotonic() + DEPLOY_DETAIL_WAIT_S
    while meta.get("status") == FAILED_TO_RUN and not meta.get(DEPLOY_DETAIL) and time.monotonic() < deadline:
        time.sleep(0.2)
        meta = link.run(Session.get_job_meta, job_id)
    return meta


def _with_connected_sites(link: Reconnecting, reason: str) -> str:
    """A scheduler reason that does not name the missing sites (a server kit without our scheduler) gets the
    connected ones, so the admin can tell which are missing."""
    if "not connected:" in reason:
        return reason
    connected = sorted(c.name for c in link.run(Session.get_connected_client_list))
    return f"{reason} (connected: {', '.join(connected) or 'none'})"


def _download(session: Session, job_id: str) -> Path | None:
    try:
        return Path(session.download_job_result(job_id))
    except LOST:
        raise
    except Exception:  # a job that never ran has nothing to download; its meta says why
        return None
