"""What the study lead's page shows, asked of the server through the admin's FLARE API session: the sites connected
(and those a job lists that are not), every job with its status, and for a running round-based job its progress
(`show_stats JOB server`, server_app.progress): round k of n with an ETA from the measured round times, each site's
last outcome, the sites that came back, the validation curve and the bytes per site and round.

One session serves every page load, under a lock (the FLARE API session is not made for parallel commands), and a
snapshot is reused for `CACHE_S`, so a page open on several screens asks the server once per few seconds.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvflare.fuel.flare_api.flare_api import Session

from federation_tools.admin import Reconnecting
from federation_tools.status.job_report import results_path
from federation_tools.status.progress import Progress, progress_of
from fl_contract.job_privacy import JOB_KIND_KEY
from fl_runtime.status_server import Reused
from server_app.rejoin import SITE_RETURNS_KEY

CACHE_S = 3.0
JOBS_SHOWN = 25
CONNECTED_WITHIN_S = 60.0
"""A site whose last heartbeat is older than this is shown as not connected (FLARE drops it after its timeout)."""


def _when(stamp: float | None) -> str:
    if not stamp:
        return ""
    return dt.datetime.fromtimestamp(float(stamp), dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class SiteRow:
    name: str
    connected: bool
    last_heartbeat: str
    seconds_since: float | None


@dataclass
class JobRow:
    job_id: str
    name: str
    kind: str
    status: str
    submitter: str
    submitted: str
    duration: str
    sites: list[str]
    progress: Progress | None = None
    site_returns: list[dict[str, Any]] = field(default_factory=list)
    """What the server said of each site that registered again during the job (back in it, or why not)."""
    downloaded: bool = False
    """Its results are in this admin kit's downloads: the page links its report (`/jobs/JOB_ID`)."""

    @property
    def running(self) -> bool:
        return self.status == "RUNNING"


@dataclass
class StudyStatus:
    server: str
    server_status: str
    server_started: str
    generated_at: str
    sites: list[SiteRow]
    jobs: list[JobRow]
    problem: str = ""

    @property
    def connected(self) -> list[str]:
        return [s.name for s in self.sites if s.connected]

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["connected"] = self.connected
        return data


def _sites(info: Any, jobs: list[dict[str, Any]], now: float) -> list[SiteRow]:
    rows = {}
    for client in info.client_info:
        last = float(client.last_connect_time or 0.0)
        since = now - last if last else None
        rows[client.name] = SiteRow(client.name, since is not None and since < CONNECTED_WITHIN_S, _when(last),
                                    None if since is None else round(since, 1))
    listed = {site for job in jobs for site in _deployed_sites(job) if not site.startswith("@")}
    for site in sorted(listed - set(rows)):
        rows[site] = SiteRow(site, False, "", None)
    return [rows[name] for name in sorted(rows)]


def _deployed_sites(meta: dict[str, Any]) -> list[str]:
    """The sites the job's deploy map names ("@ALL": every site, named as FLARE names it)."""
    sites: set[str] = set()
    for targets in (meta.get("deploy_map") or {}).values():
        sites.update(str(t) for t in targets if t != "server")
    return sorted(sites)


class StudyStatusSource:
    """A `StudyStatus` on each call, through one admin session that reconnects when the server restarts."""

    def __init__(self, session: Session, server: str, downloads: Path | None = None):
        self.link = Reconnecting(session, lambda _: None)
        self.server = server
        self.downloads = downloads
        self._reused = Reused(self._read, CACHE_S)

    def __call__(self) -> StudyStatus:
        return self._reused()

    def _read(self) -> StudyStatus:
        generated = _when(time.time())
        try:
            info = self.link.run(Session.get_system_info)
            jobs = self.link.run(lambda s: s.list_jobs(detailed=True, reverse=True, limit=JOBS_SHOWN))
        except ConnectionError as exc:
            return StudyStatus(self.server, "unreachable", "", generated, [], [], str(exc))
        rows = [self._job(meta) for meta in jobs or []]
        rows.sort(key=lambda j: (not j.running, j.submitted), reverse=False)
        running = [j for j in rows if j.running]
        rows = running + sorted((j for j in rows if not j.running), key=lambda j: j.submitted, reverse=True)
        return StudyStatus(self.server, str(info.server_info.status), _when(info.server_info.start_time), generated,
                           _sites(info, jobs or [], time.time()), rows)

    def _job(self, meta: dict[str, Any]) -> JobRow:
        job = JobRow(job_id=str(meta.get("job_id", "")), name=str(meta.get("name", "")),
                     kind=str(meta.get(JOB_KIND_KEY, "")), status=str(meta.get("status", "")),
                     submitter=str(meta.get("submitter_name", "")),
                     submitted=str(meta.get("submit_time_iso", ""))[:19],
                     duration=str(meta.get("duration", "")).split(".")[0], sites=_deployed_sites(meta),
                     site_returns=list(meta.get(SITE_RETURNS_KEY) or []))
        job.downloaded = self.downloads is not None and results_path(self.downloads, job.job_id) is not None
        if job.running:
            try:
                stats = self.link.run(Session.show_stats, job.job_id, "server")
            except Exception:  # noqa: BLE001 - a job whose server process is starting or ending: no progress yet
                stats = {}
            job.progress = progress_of(stats or {})
        return job


def admin_settings(kit: Path) -> tuple[str, Path]:
    """The server's address as the admin kit names it (the page's heading) and the kit's downloads folder."""
    import json

    admin = json.loads((Path(kit) / "startup" / "fed_admin.json").read_text()).get("admin", {})
    return f"{admin.get('host', '?')}:{admin.get('port', '?')}", Path(kit) / str(admin.get("download_dir", "transfer"))
