"""A site that registers again while its job runs is given that job again: deployed, started, and taken back.

A hospital's site restarts (a patch reboot, a service manager restarting a crashed client): its new client process
registers with a new token and runs no job, while the job that lists it runs on. FLARE 2.9 deploys a job to its
sites only once, at job start, so the site would sit out every remaining round. This module, run by
`server_app.recovery.JobRecovery` in the server's main process when it hears the registration, does for that one
site what FLARE's job runner did at job start:

1. waits for the new client's first heartbeat (its admin channel is up then);
2. asks the site's resource check (`check_client_resources`: the site's resource manager and every site component
   that blocks a job there, as at scheduling);
3. deploys the job's site app with FLARE's own deploy message (`JobRunner._make_deploy_message`): the site's
   authorisation, its site guard (role, agent version, privacy, budget) and its deployer (no code, allow-list,
   datasets) decide exactly as at job start, and a refusal is final for this job;
4. puts the new token in place of the old one among the job's participants (`run_processes[job][PARTICIPANTS]`,
   which FLARE's heartbeat check and abort read), and has the job's server process take the new list
   (`send_app_command` -> `SiteAwareController`, which calls FLARE's `sync_clients_from_main_process`), so the
   server job accepts the new job process's requests (it looks clients up by token);
5. starts the site's job process (FLARE's start-job message, with the reservation token of step 2, given longer
   for its answer than FLARE's 20 s) and expects the site's outcome of the job again
   (`JobRunner._pending_client_outcomes`), as for any site at job start.

Nothing about the round is decided here: the job's workflow sends the returning site the next task it asks for,
checks its answers like anyone's, and results.json records the rounds it missed (`server_app.results.site_returns`).
Each step's result goes to the job's site events (`server_app.site_events`) and, for the admin's follower, to the
job's meta (`site_returns`). A site that still runs the job (a link outage: its client never registered again)
is never redeployed: registration means a new client process, which runs no job.

The FLARE 2.9 internals used (tests/server/test_rejoin_internals.py fails when they change):
`JobRunner.running_jobs`, `JobRunner._make_deploy_message`, `JobRunner._pending_client_outcomes` and its `lock`,
`ServerEngine.run_processes` / `exception_run_processes`, `ServerEngine.check_client_resources`,
the start-job message `ServerEngine.start_client_job` builds (`TrainingTopic.START_JOB` with its headers),
`ServerEngine.send_app_command`, `AdminServer.send_requests_and_get_reply_dict`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from nvflare.apis.fl_constant import FLContextKey, RunProcessKey
from nvflare.apis.job_def import ALL_SITES, Job, JobMetaKey
from nvflare.private.admin_defs import Message, MsgHeader, ReturnCode
from nvflare.private.defs import ERROR_MSG_PREFIX, RequestHeader, TrainingTopic
from nvflare.private.fed.server.job_runner import JobRunner
from nvflare.private.fed.utils.fed_utils import extract_participants
from nvflare.private.scheduler_constants import ShareableHeader
from nvflare.utils.job_launcher_utils import get_resource_manager_spec

from server_app.site_events import REJOIN_FAILED, REJOINED, append_event

SYNC_SITES_TOPIC = "hospital_fl.sync_sites"
"""The app command the job's server process answers by taking the main process's participants again."""
SITE_RETURNS_KEY = "site_returns"
"""Job meta: one entry per return of a site (site, time, what happened), for the admin's follower."""
FIRST_HEARTBEAT_WAIT_S = 30.0
"""How long a rejoin waits for the new client's first heartbeat before it deploys anyway."""
DEPLOY_TIMEOUT_S = 60.0
START_TIMEOUT_S = 120.0
JOB_START_WAIT_S = 90.0
_META_LOCK = threading.Lock()
"""One return at a time updates a job's `site_returns` (two sites back at once must not overwrite each other's)."""


class Heartbeats:
    """The first heartbeat each newly registered client sends (its admin channel is up from then on)."""

    def __init__(self) -> None:
        self._seen: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def expect(self, site: str) -> threading.Event:
        with self._lock:
            self._seen[site] = threading.Event()
            return self._seen[site]

    def heard(self, site: str) -> None:
        with self._lock:
            event = self._seen.pop(site, None)
        if event is not None:
            event.set()


def jobs_listing(engine: Any, site: str) -> list[str]:
    """The jobs whose server process runs (not failed) that `site` takes part in; one still starting at its other
    sites counts (FLARE lists it as running only once every site answered its start)."""
    jobs = []
    for job_id, info in dict(engine.run_processes).items():
        participants = (info or {}).get(RunProcessKey.PARTICIPANTS) or {}
        if job_id not in engine.exception_run_processes and \
                any(getattr(client, "name", None) == site for client in participants.values()):
            jobs.append(job_id)
    return jobs


def site_app(job: Job, site: str) -> str:
    """The name of the app the job deploys to `site` ("" when the job deploys none to it)."""
    for app_name, participants in job.get_deployment().items():
        names = extract_participants(participants)
        if site in names or (len(names) == 1 and names[0].upper() == ALL_SITES):
            return str(app_name)
    return ""


class Rejoin:
    """One returning site's way back into one running job (steps 1-5 of the module's docstring), in its own thread:
    the registration that triggered it must be answered first."""

    def __init__(self, engine: Any, job_id: str, site: str, first_heartbeat: threading.Event,
                 log: Callable[[str], None]):
        self.engine, self.job_id, self.site = engine, job_id, site
        self.first_heartbeat, self.log = first_heartbeat, log
        self.started = time.time()

    def start(self) -> None:
        threading.Thread(target=self.run, name=f"rejoin-{self.site}-{self.job_id}", daemon=True).start()

    def run(self) -> None:
        try:
            self.first_heartbeat.wait(FIRST_HEARTBEAT_WAIT_S)
            refusal = self.rejoin()
        except Exception as exc:  # a rejoin that fails must never take the server's main process down
            refusal = f"the server could not deploy the job again ({type(exc).__name__}: {exc})"
        if refusal:
            self._record(REJOIN_FAILED, refusal)
        else:
            self._record(REJOINED, f"its job was deployed and started again {time.time() - self.started:.1f} s "
                                   "after it registered")

    def running_job(self) -> Job | None:
        """The job as FLARE's job runner runs it, once its start at the other sites has ended (it waits up to 20 s for
        each site's answer, a site that was killed during the start included); None when it ended first."""
        deadline = time.monotonic() + JOB_START_WAIT_S
        while self.job_id in self.engine.run_processes and time.monotonic() < deadline:
            job = self.engine.job_runner.running_jobs.get(self.job_id)
            if job is not None:
                return cast(Job, job)
            time.sleep(0.5)
        return None

    def rejoin(self) -> str:
        """Deploy and start the job at the site; the reason it cannot, or ""."""
        engine = self.engine
        job = self.running_job()
        client = engine.get_client_from_name(self.site)
        if job is None or self.job_id not in engine.run_processes:
            return "the job ended before the site was back"
        if client is None:
            return "the site's client went away again before its job was deployed"
        app_name = site_app(job, self.site)
        if not app_name:
            return "the job deploys no app to this site"
        with engine.new_context() as fl_ctx:
            fl_ctx.set_prop(FLContextKey.CURRENT_JOB_ID, self.job_id, private=True, sticky=False)
            resources = get_resource_manager_spec({**job.meta, JobMetaKey.RESOURCE_SPEC.value: job.resource_spec},
                                                  self.site)
            enough, reservation = engine.check_client_resources(job, {self.site: resources}, fl_ctx).get(
                self.site, (False, ""))
            if not enough:
                return f"the site's resource check refused the job again: {reservation or 'no answer'}"
            refusal = self._deploy(job, app_name, client.token, fl_ctx)
            if refusal:
                return refusal
            self._replace_participant(client)
            engine.send_app_command(self.job_id, SYNC_SITES_TOPIC, {"site": self.site}, timeout=10.0)
            refusal = self._start_job(job, resources, reservation, client.token)
            if refusal:
                return refusal
        runner = engine.job_runner
        with runner.lock:  # a job that ended meanwhile waits for no outcome (FLARE would fail it for the missing one)
            if self.job_id in engine.run_processes and self.job_id in runner._pending_client_outcomes:
                runner._pending_client_outcomes[self.job_id].add(self.site)
        return ""

    def _deploy(self, job: Job, app_name: str, token: str, fl_ctx: Any) -> str:
        """FLARE's own deploy message to the site; its refusal (authorisation, site guard, deployer), or ""."""
        message = JobRunner._make_deploy_message(job, job.get_application(app_name, fl_ctx), app_name, fl_ctx)
        return self._ask(token, message, DEPLOY_TIMEOUT_S, "the deploy", "the site refused the job again")

    def _start_job(self, job: Job, resources: dict[str, Any], reservation: str, token: str) -> str:
        """FLARE's start-job message to the site (as `ServerEngine.start_client_job` builds it); the site's error, or
        "". FLARE's own call waits 20 s for the answer, which a loaded site's launch of its job process outlasts
        (measured under CI's load: the job process started, its answer came late); this one waits
        `START_TIMEOUT_S`."""
        message = Message(topic=TrainingTopic.START_JOB, body=resources)
        message.set_header(RequestHeader.JOB_ID, job.job_id)
        message.set_header(RequestHeader.JOB_META, job.meta)
        message.set_header(ShareableHeader.RESOURCE_RESERVE_TOKEN, reservation)
        return self._ask(token, message, START_TIMEOUT_S, "the start of the job",
                         "the site did not start the job again")

    def _ask(self, token: str, message: Message, timeout: float, what: str, refused: str) -> str:
        """Send one admin request to the site's client; "" when it answered OK, else what went wrong."""
        reply = self.engine.server.admin_server.send_requests_and_get_reply_dict({token: message},
                                                                                  timeout_secs=timeout).get(token)
        if reply is None:
            return f"the site did not answer {what} within {timeout:.0f} s"
        body = reply.body
        if reply.get_header(MsgHeader.RETURN_CODE, ReturnCode.OK) != ReturnCode.OK or \
                (isinstance(body, str) and body.startswith(ERROR_MSG_PREFIX)):
            return f"{refused}: {' '.join(str(body).split())}"
        return ""

    def _replace_participant(self, client: Any) -> None:
        """The new token in place of the site's old one among the job's participants (FLARE reads this dict when it
        checks the site's heartbeat against the job and when it aborts the job)."""
        participants: dict[str, Any] = self.engine.run_processes[self.job_id][RunProcessKey.PARTICIPANTS]
        for token in [t for t, c in participants.items() if getattr(c, "name", None) == self.site]:
            participants.pop(token, None)
        participants[client.token] = client

    def _record(self, kind: str, detail: str) -> None:
        engine = self.engine
        append_event(Path(engine.get_workspace().get_run_dir(self.job_id)), self.site, kind, detail)
        self.log(f"job {self.job_id}: {self.site} {detail}")
        try:
            with _META_LOCK, engine.new_context() as fl_ctx:
                manager = engine.job_def_manager
                job = manager.get_job(self.job_id, fl_ctx)
                returns = list((job.meta if job else {}).get(SITE_RETURNS_KEY) or [])
                returns.append({"site": self.site, "time": time.time(), "rejoined": kind == REJOINED,
                                "detail": detail})
                manager.update_meta(self.job_id, {SITE_RETURNS_KEY: returns}, fl_ctx)
        except Exception as exc:  # the meta is for the admin's follower; the site events already hold it
            self.log(f"job {self.job_id}: could not record {self.site}'s return in the job's meta: {exc}")


def sync_sites_command(topic: str, data: Any, fl_ctx: Any) -> dict[str, Any]:
    """In the job's server process: take the main process's participants again (FLARE's own call at job start), so
    a returned site's new token is known before its job process asks for a task."""
    engine = fl_ctx.get_engine()
    engine.sync_clients_from_main_process()
    return {"sites": sorted(client.name for client in engine.get_clients())}


def accept_returning_sites(engine: Any) -> None:
    """Register `sync_sites_command` in the job's server process (called once per job, by its workflow)."""
    engine.register_app_command(SYNC_SITES_TOPIC, sync_sites_command)
