"""The site's audit log: one JSON line per event, kept where no job can write (`records_dir` of the site policy,
default the kit's `local/`, outside every job's workspace; jobs carry no code, and no job argument names the file).

Events: a job seen at deploy (id, kind, submitter and role, the agent version it was built for and the one
installed), accepted or refused and why, started (and charged to the ledger) or refused at start, every task that
arrived (task, round, bytes of its arrays), every task result that left (task, round, bytes, sha256 of the
serialised payload, and for FedKT-CSD the sha256 of the statistics before masking, which the privacy officer
matches with the reviewed export's `payload_sha256`), the job's end, and every admin command that reached the site
(allowed or refused, with the admin's name and role).

    site-agent audit --kit KIT [--job JOB_ID]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from site_agent.privacy.journal import Journal, table
from site_agent.privacy.policy import PolicyInForce

AUDIT_FILE = "audit_log.jsonl"

JOB_SEEN = "job_seen"
JOB_ACCEPTED = "job_accepted"
JOB_REDEPLOYED = "job_redeployed"  # deployed again after this site's restart mid-job; the earlier run folder kept
JOB_REFUSED = "job_refused"
JOB_STARTED = "job_started"
JOB_REFUSED_AT_START = "job_refused_at_start"
TASK_RECEIVED = "task_received"  # a task reached the site: its name, round and the bytes of its arrays
RESULT_SENT = "result_sent"
JOB_END = "job_end"
COMMAND_REFUSED = "command_refused"
COMMAND_ALLOWED = "command_allowed"
SUMMARY_EXPORTED = "summary_exported"  # the privacy officer exported a data summary (site-agent summary export)


class AuditLog:
    def __init__(self, folder: Path):
        self.journal = Journal(Path(folder) / AUDIT_FILE)

    def record(self, event: str, job_id: str = "", **fields: Any) -> None:
        self.journal.append({"event": event, "job_id": job_id, **fields})

    def entries(self, job_id: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.journal.read() if job_id is None or e.get("job_id") == job_id]


def format_audit(entries: list[dict[str, Any]]) -> str:
    if not entries:
        return "no events recorded yet"
    rows = [[e["time"], e["event"], e.get("job_id", ""),
             ", ".join(f"{k}={v}" for k, v in sorted(e.items()) if k not in ("time", "event", "job_id"))]
            for e in entries]
    return table(["TIME", "EVENT", "JOB", "DETAIL"], rows)


def _audit(args: argparse.Namespace) -> int:
    site = PolicyInForce.read(Path(args.kit) / "local")
    log = AuditLog(site.records)
    print(f"audit log {log.journal.path}" + (f" (no policy in force: {site.problem})" if site.problem else ""))
    print(format_audit(log.entries(args.job)))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("audit", help="the site's audit log: jobs seen, accepted or refused, results sent")
    parser.add_argument("--kit", required=True, help="folder of this site's startup kit")
    parser.add_argument("--job", help="only this job's events")
    parser.set_defaults(func=_audit)
