"""What the server's main process learns about a running job's sites, handed to the job's workflow.

FLARE tells a job's process only that a site is gone, never why: the reason (the site's job process failed with
this exit code, its client stopped answering, its client came back) is known to the server's main process alone
(`server_app.recovery` hears it). The main process appends each event to a JSON-lines file in the job's run folder
on the server, which the workflow (a separate process) reads when it records a round's outcomes or a stop, so
results.json and the admin name each site and what happened to it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

EVENTS_FILE = "site_events.jsonl"
JOB_PROCESS_FAILED = "job_process_failed"
CLIENT_GONE = "client_gone"
RETURNED = "returned"
REJOINED = "rejoined"
REJOIN_FAILED = "rejoin_failed"


@dataclass(frozen=True)
class SiteEvent:
    site: str
    kind: str
    detail: str
    time: float


def events_file(run_dir: Path) -> Path:
    return Path(run_dir) / EVENTS_FILE


def append_event(run_dir: Path, site: str, kind: str, detail: str) -> None:
    """Record one event (called in the server's main process; one short line per write, appended)."""
    path = events_file(run_dir)
    if not path.parent.is_dir():
        return  # the job's run folder is gone: nobody left to tell
    line = json.dumps({"site": site, "kind": kind, "detail": detail, "time": time.time()})
    with path.open("a") as out:
        out.write(line + "\n")
    path.chmod(0o600)


def read_events(run_dir: Path) -> list[SiteEvent]:
    """Every event recorded for the job so far, oldest first (a torn last line is skipped)."""
    path = events_file(run_dir)
    if not path.is_file():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
            events.append(SiteEvent(str(record["site"]), str(record["kind"]), str(record["detail"]),
                                    float(record["time"])))
        except (ValueError, KeyError, TypeError):
            continue
    return events


def last_event_by_site(run_dir: Path, since: float = 0.0) -> dict[str, SiteEvent]:
    """Each site's latest event at or after `since`."""
    latest: dict[str, SiteEvent] = {}
    for event in read_events(run_dir):
        if event.time >= since:
            latest[event.site] = event
    return latest


def latest_of_kind(run_dir: Path, sites: Iterable[str], kind: str, since: float = 0.0) -> set[str]:
    """The `sites` whose latest event at or after `since` (wall clock) is of `kind` (e.g. RETURNED: being deployed
    the job again; REJOINED: their job started again)."""
    events = last_event_by_site(run_dir, since)
    return {site for site in sites if site in events and events[site].kind == kind}


def describe(event: SiteEvent) -> str:
    """The event in the words results.json and the admin read."""
    if event.kind == JOB_PROCESS_FAILED:
        return f"its job process failed ({event.detail})"
    if event.kind == CLIENT_GONE:
        return f"its client stopped answering ({event.detail})"
    if event.kind == RETURNED:
        return "its client stopped, then registered again; the server is deploying the job to it again"
    if event.kind == REJOINED:
        return f"its client stopped and registered again; {event.detail}"
    if event.kind == REJOIN_FAILED:
        return f"its client stopped and registered again, but it is not back in this job: {event.detail}"
    return event.detail
