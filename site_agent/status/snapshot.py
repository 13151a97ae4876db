"""What the site's status page shows, read from what the kit already records: the audit log, the privacy ledger, the
policy, the certificate, the last `site-agent check`, FLARE's client log, and a live mutual-TLS probe of the server.

Reading changes nothing: the audit log and ledger are read without their lock (a line being appended is not read
until it is whole), and the server probe is at most one short TLS exchange per `PROBE_EVERY_S`, whatever the page
load rate, so a page open on a desk does not slow the job.

Nothing patient-derived is in it: the audit log holds job events, byte counts and digests, and the data rows are the
check's counts. A path outside the kit (a data folder, a file a refusal names) is shown as the dataset key or as
`[path outside the kit]` (`redact`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from fl_contract.version import AGENT_VERSION
from fl_runtime.status_server import Reused
from site_agent.kit.preflight import LAST_CHECK_FILE, OK, CheckResult, check_server
from site_agent.kit.site_config import SiteConfig, SiteConfigError
from site_agent.kit.start import CLIENT_MODULE, REGISTERED
from site_agent.kit.startup import KitError, SiteKit, verify_certificate_chain
from site_agent.privacy.audit import (
    COMMAND_REFUSED,
    JOB_ACCEPTED,
    JOB_END,
    JOB_REFUSED,
    JOB_REFUSED_AT_START,
    JOB_SEEN,
    JOB_STARTED,
    RESULT_SENT,
    TASK_RECEIVED,
    AuditLog,
)
from site_agent.privacy.ledger import Ledger
from site_agent.privacy.policy import PolicyInForce, SitePolicy

PROBE_EVERY_S = 30.0
CACHE_S = 2.0
AUDIT_ROWS = 60
REFUSALS = (JOB_REFUSED, JOB_REFUSED_AT_START, COMMAND_REFUSED)
_LOG_TAIL_BYTES = 256 * 1024
_PATH = re.compile(r"(?<![^\s='\"(])/[^\s:;,'\"()<>\[\]]+")
"""An absolute path: a "/" at the start or after a space, "=", a quote or "(" (so "</b>" or "1/2" is none)."""


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Redactor:
    """Shows a data folder as its dataset key and any other path outside the kit as `[path outside the kit]`."""

    def __init__(self, kit: Path, folders: dict[str, Path]):
        self.kit = str(kit.resolve())
        self.folders = sorted(((str(p), key) for key, p in folders.items()), key=lambda f: -len(f[0]))

    def __call__(self, value: Any) -> str:
        text = str(value)
        for folder, key in self.folders:
            text = text.replace(folder, f"[dataset {key}]")
        return _PATH.sub(lambda m: m.group(0) if m.group(0).startswith(self.kit) else "[path outside the kit]", text)


@dataclass(frozen=True)
class Connection:
    server: str
    client_pid: int | None
    client_since: str
    registered_at: str
    """When FLARE's client last said the server registered it (its log.txt); "" when it has not."""
    server_status: str
    """The live mutual-TLS probe: OK when the server answered after the handshake (preflight's server row)."""
    server_detail: str
    rtt_ms: float | None
    probed_at: str
    certificate_expires: str
    certificate_days_left: int | None
    link_detail: str
    """The last `site-agent check`'s link row (round trip and upload rate), "" when it never ran."""
    link_checked_at: str


@dataclass(frozen=True)
class Transfer:
    task: str
    round: int | None
    bytes: int
    time: str


@dataclass
class JobActivity:
    job_id: str
    name: str = ""
    kind: str = ""
    submitter: str = ""
    state: str = "seen"
    """seen, accepted, refused, running, ended, or stopped (started, no end recorded and no job process left)."""
    reason: str = ""
    first_seen: str = ""
    last_event: str = ""
    last_received: Transfer | None = None
    last_sent: Transfer | None = None
    tasks_received: int = 0
    results_sent: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    masked: bool = False
    """Its results left masked (secure aggregation): the server saw only the sites' sum."""
    epsilon: float | None = None
    delta: float | None = None
    charged: bool = False

    @property
    def round(self) -> int | None:
        return self.last_received.round if self.last_received else None


@dataclass(frozen=True)
class Budget:
    epsilon: float
    delta: float
    jobs: int
    budget_epsilon: float | None
    budget_delta: float | None

    @property
    def used(self) -> float:
        """The larger share of either budget spent, 0-1 (for the bar)."""
        if not self.budget_epsilon or not self.budget_delta:
            return 0.0
        return max(self.epsilon / self.budget_epsilon, self.delta / self.budget_delta)


@dataclass(frozen=True)
class Row:
    name: str
    status: str
    detail: str


@dataclass
class SiteStatus:
    site: str
    agent_version: str
    generated_at: str
    connection: Connection
    jobs: list[JobActivity]
    budget: Budget
    policy: list[tuple[str, str, str]]
    """(rule, value, what it means) for every field of the policy in force."""
    policy_problem: str
    audit: list[dict[str, str]]
    """Refusals first (newest first), then the other events, newest first: time, event, job, detail."""
    refusals: dict[str, int]
    data: list[Row]
    data_checked_at: str

    @property
    def running(self) -> list[JobActivity]:
        return [j for j in self.jobs if j.state == "running"]

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["running"] = [j.job_id for j in self.running]
        for job, raw in zip(self.jobs, data["jobs"]):
            raw["round"] = job.round
        return data


class SiteStatusSource:
    """Builds a `SiteStatus` of one kit, at most once per CACHE_S (a page, its JSON and a Prometheus scrape arriving
    together read the records once); the server probe is cached for PROBE_EVERY_S."""

    def __init__(self, kit_dir: Path, probe: bool = True):
        self.kit = SiteKit.open(Path(kit_dir).resolve())
        self.probe = probe
        self._server_probe = Reused(self._probe_server, PROBE_EVERY_S)
        self._reused = Reused(self._read, CACHE_S)

    def __call__(self) -> SiteStatus:
        return self._reused()

    def _read(self) -> SiteStatus:
        """The status now: the audit log, ledger, policy and last check read afresh."""
        site = PolicyInForce.read(self.kit.root / "local")
        redact = Redactor(self.kit.root, self._data_folders())
        audit = AuditLog(site.records).entries()
        ledger = Ledger(site.records)
        jobs = _jobs(audit, ledger.entries(), _process_lines(), redact)
        last_check = _last_check(self.kit.root)
        totals = ledger.totals()
        policy = site.policy
        return SiteStatus(
            site=self.kit.site_name, agent_version=AGENT_VERSION, generated_at=now(),
            connection=self._connection(last_check),
            jobs=jobs,
            budget=Budget(totals.epsilon, totals.delta, totals.jobs, policy.budget_epsilon if policy else None,
                          policy.budget_delta if policy else None),
            policy=_policy_rows(policy), policy_problem=redact(site.problem),
            audit=_audit_rows(audit, redact),
            refusals={event: sum(1 for e in audit if e.get("event") == event) for event in REFUSALS},
            data=[Row(r["name"], r["status"], redact(r["detail"]) + (f" ({r['problems']} problem(s): run site-agent "
                      "check)" if r.get("problems") else "")) for r in last_check.get("rows", [])
                  if str(r.get("name", "")).startswith("data")],
            data_checked_at=str(last_check.get("time", "")),
        )

    def _data_folders(self) -> dict[str, Path]:
        try:
            config = SiteConfig.for_kit(self.kit.root)
            return {key: config.data_dir(key, self.kit.site_name).resolve() for key in config.datasets}
        except (SiteConfigError, OSError):
            return {}

    def _probe_server(self) -> tuple[CheckResult, float | None, str]:
        """The live mutual-TLS probe (reused for PROBE_EVERY_S): its row, round trip in ms when it passed, when."""
        started = time.monotonic()
        result = check_server(self.kit, timeout=3.0)
        rtt = (time.monotonic() - started) * 1000 if result.status == OK else None
        return result, rtt, now()

    def _connection(self, last_check: dict[str, Any]) -> Connection:
        if self.probe:
            probe, rtt, probed_at = self._server_probe()
        else:
            probe, rtt, probed_at = CheckResult("server", "-", "not probed"), None, ""
        try:
            report = verify_certificate_chain(self.kit.certificate, self.kit.private_key, self.kit.root_ca,
                                              site_name=self.kit.site_name)
            expires, days = f"{report.not_after:%Y-%m-%d}", report.days_left
        except KitError as exc:
            expires, days = f"invalid: {exc}", None
        pid, since = _client_process(self.kit.root)
        link: dict[str, Any] = next((r for r in last_check.get("rows", []) if r.get("name") == "link"), {})
        return Connection(
            server=f"{self.kit.server_host}:{self.kit.server_port}", client_pid=pid, client_since=since,
            registered_at=_registered_at(self.kit), server_status=probe.status, server_detail=probe.detail,
            rtt_ms=None if rtt is None else round(rtt, 1), probed_at=probed_at, certificate_expires=expires,
            certificate_days_left=days, link_detail=str(link.get("detail", "")),
            link_checked_at=str(last_check.get("time", "")) if link else "")


def _last_check(kit_root: Path) -> dict[str, Any]:
    path = kit_root / "local" / LAST_CHECK_FILE
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _process_lines() -> list[tuple[int, float, list[str]]]:
    """(pid, start time, command line) of this account's processes: the site's client and job processes."""
    found = []
    for process in psutil.process_iter(["pid", "create_time", "cmdline", "uids"]):
        try:
            found.append((process.info["pid"], process.info["create_time"], process.info["cmdline"] or []))
        except (psutil.Error, KeyError):
            continue
    return found


def _client_process(kit_root: Path) -> tuple[int | None, str]:
    """FLARE's client for this kit (`-m KIT` of the client module): its pid and since when it runs."""
    for pid, created, cmdline in _process_lines():
        if CLIENT_MODULE in cmdline and str(kit_root) in cmdline:
            return pid, dt.datetime.fromtimestamp(created, dt.UTC).isoformat(timespec="seconds")
    return None, ""


def _registered_at(kit: SiteKit) -> str:
    """The time stamp of the last registration line in the tail of FLARE's client log (log.txt)."""
    path = kit.root / "log.txt"
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - _LOG_TAIL_BYTES))
            tail = handle.read().decode(errors="replace")
    except OSError:
        return ""
    marker = f"{REGISTERED}{kit.site_name} "
    lines = [line for line in tail.splitlines() if marker in line]
    return lines[-1][:19] if lines else ""


def _jobs(audit: list[dict[str, Any]], ledger: list[dict[str, Any]], processes: list[tuple[int, float, list[str]]],
          redact: Redactor) -> list[JobActivity]:
    """Every job the audit log names, newest first, with what it received and sent and what the ledger charged."""
    jobs: dict[str, JobActivity] = {}
    for entry in audit:
        job_id = str(entry.get("job_id", ""))
        if not job_id:
            continue
        job = jobs.setdefault(job_id, JobActivity(job_id, first_seen=str(entry.get("time", ""))))
        event, when = entry.get("event"), str(entry.get("time", ""))
        job.last_event = when
        if event == JOB_SEEN:
            job.name, job.kind = str(entry.get("job_name") or ""), str(entry.get("job_kind") or "")
            job.submitter = str(entry.get("submitter") or "")
        elif event == JOB_ACCEPTED:
            job.state = "accepted"
        elif event in (JOB_REFUSED, JOB_REFUSED_AT_START):
            job.state, job.reason = "refused", redact(entry.get("reason", ""))
        elif event == JOB_STARTED:
            job.state = "running"
        elif event == JOB_END:
            job.state = "ended"
        elif event == TASK_RECEIVED:
            job.last_received = Transfer(str(entry.get("task", "")), entry.get("round"),
                                         int(entry.get("array_bytes") or 0), when)
            job.tasks_received += 1
            job.bytes_received += job.last_received.bytes
        elif event == RESULT_SENT:
            job.last_sent = Transfer(str(entry.get("task", "")), entry.get("round"),
                                     int(entry.get("payload_bytes") or 0), when)
            job.results_sent += 1
            job.bytes_sent += job.last_sent.bytes
            job.masked = job.masked or bool(entry.get("masked"))
    for charge in ledger:
        charged = jobs.get(str(charge.get("job_id")))
        if charged is not None:
            charged.charged, charged.epsilon, charged.delta = True, charge.get("epsilon"), charge.get("delta")
            charged.masked = charged.masked or bool(charge.get("secure_aggregation"))
    commands = [" ".join(cmdline) for _, _, cmdline in processes]
    for job in jobs.values():
        if job.state == "running" and not any(job.job_id in line for line in commands):
            job.state = "stopped"
    return sorted(jobs.values(), key=lambda j: j.first_seen, reverse=True)


def _policy_rows(policy: SitePolicy | None) -> list[tuple[str, str, str]]:
    if policy is None:
        return []
    values = policy.to_json()
    return [(f.name, json.dumps(values[f.name]), str(f.metadata.get("help", "")))
            for f in dataclasses.fields(policy)]


def _audit_rows(audit: list[dict[str, Any]], redact: Redactor) -> list[dict[str, str]]:
    def row(entry: dict[str, Any]) -> dict[str, str]:
        detail = ", ".join(f"{k}={v}" for k, v in sorted(entry.items()) if k not in ("time", "event", "job_id"))
        return {"time": str(entry.get("time", "")), "event": str(entry.get("event", "")),
                "job": str(entry.get("job_id", "")), "detail": redact(detail)}

    newest = list(reversed(audit))
    refused = [row(e) for e in newest if e.get("event") in REFUSALS]
    others = [row(e) for e in newest if e.get("event") not in REFUSALS]
    return (refused + others)[:AUDIT_ROWS]
