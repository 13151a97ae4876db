"""What the server does about faults that FLARE 2.9 leaves to the job: a restart mid-job, a site's job process dying.

Jobs the server was running when it died are never left RUNNING, and are resumed from their last completed round.

FLARE 2.9 does not restart a job's process when the server comes back: the job stays RUNNING in the job store with
no process anywhere, and `abort_job` answers that it is not running. This component, configured by `fl-provision`
in the server kit's `local/resources.json`, runs in the server's main process at start-up: it marks every job that
was RUNNING or DISPATCHED as FINISHED:ABNORMAL with the reason in its meta, and (unless switched off) clones the
resumable ones (jobs record it in their meta; a one-shot FedKT-CSD job is not: its admin resubmits it).
The clone has the same name and configuration; recovery records, server-side, that this clone (and no other job)
resumes the interrupted run's checkpoint (`server_app.checkpoint`), and the digest of every job it deploys, so the
clone goes on from the last completed round only if it is the same job. The original's meta names the clone
(`resumed_as`) so the admin's tools can follow it.

A site's job process that ends with an exception, or never starts (FLARE's EXCEPTION and INFRASTRUCTURE_ERROR
reports), makes FLARE fail the whole job at once, even when the other sites could finish it. FLARE has no setting
for this, so the component replaces the server's handler of those reports (the rest stay FLARE's): the site is
reported dead to the job instead, and the job's workflow goes on without it while `min_clients` sites remain, as it
does for a site whose whole client died. A configuration error or an unsafe component (a site refusing the job at
start) still fails the job, as FLARE does.

FLARE tells a job's workflow that a site is gone but never why; the component records each site event it hears
(a job process that failed and how, a client that stopped answering, a client that registered again mid-job) in
the job's run folder (`server_app.site_events`), where the workflow reads it to name each site's outcome; a client
that registers again mid-job is reported gone to the job, which FLARE does not do when it is back within the
server's heartbeat timeout, and is then given the job again: deployed, started and taken back by the job's
workflow (`server_app.rejoin`, unless `rejoin` is switched off). A site told to end the jobs the restarted
server no longer runs is given the time FLARE's client takes for that before its next heartbeat
(`server_app.heartbeat_grace`). A signature the server made for its own messages in FLARE's start-up window, which
would refuse every admin session until the next restart, is not kept (`server_app.startup_signature`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvflare.apis.event_type import EventType
from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_constant import FLContextKey, RunProcessKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.job_def import JobMetaKey, RunStatus
from nvflare.fuel.common.exit_codes import ProcessExitCode
from nvflare.fuel.f3.cellnet.core_cell import make_reply
from nvflare.fuel.f3.cellnet.defs import CellChannel, CellChannelTopic
from nvflare.fuel.f3.cellnet.defs import ReturnCode as CellReturnCode
from nvflare.fuel.f3.message import Message
from nvflare.private.defs import CellMessageHeaderKeys, JobFailureMsgKey

from fl_contract.job_meta import RESUMABLE_KEY, RESUMED_FROM_KEY
from server_app.checkpoint import job_digest, record_job_digest, record_resumer, resumed_run
from server_app.heartbeat_grace import allow_for_orphan_cleanup
from server_app.rejoin import Heartbeats, Rejoin, jobs_listing
from server_app.site_events import CLIENT_GONE, JOB_PROCESS_FAILED, REJOIN_FAILED, RETURNED, append_event
from server_app.startup_signature import resign_own_messages_once_identity_loaded

INTERRUPTED = (RunStatus.RUNNING, RunStatus.DISPATCHED)
REASON_KEY = "interrupted"
RESUMED_AS_KEY = "resumed_as"
REASON = "the server stopped while the job was running"
_RUN_STATE_KEYS = {key.value for key in JobMetaKey} - {
    JobMetaKey.JOB_NAME.value, JobMetaKey.JOB_FOLDER_NAME.value, JobMetaKey.DEPLOY_MAP.value,
    JobMetaKey.RESOURCE_SPEC.value, JobMetaKey.MIN_CLIENTS.value, JobMetaKey.MANDATORY_CLIENTS.value,
    JobMetaKey.STUDY.value, JobMetaKey.SUBMITTER_NAME.value, JobMetaKey.SUBMITTER_ORG.value,
    JobMetaKey.SUBMITTER_ROLE.value, JobMetaKey.APPROVALS.value, JobMetaKey.DATA_STORAGE_FORMAT.value,
    JobMetaKey.CONTENT_LOCATION.value, JobMetaKey.RESULT_LOCATION.value,
}


def clone_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The meta a resumed copy keeps: what the job is and who submitted it (FLARE's own and our keys such as the
    agent version the sites check), not the interrupted run's state."""
    kept = {k: v for k, v in meta.items() if k not in _RUN_STATE_KEYS and k not in (REASON_KEY, RESUMED_AS_KEY)}
    kept[JobMetaKey.CLONED_FROM.value] = meta[JobMetaKey.JOB_ID.value]
    kept[RESUMED_FROM_KEY] = meta.get(RESUMED_FROM_KEY) or meta[JobMetaKey.JOB_ID.value]  # the first run
    return kept


SITE_JOB_FAILURES = (ProcessExitCode.EXCEPTION, ProcessExitCode.INFRASTRUCTURE_ERROR)
JOB_PROCESS_FAILED_PREFIX = "job process failed: "
CLIENT_RESTARTED = "client registered again"
REJOIN_OFF = "this server does not deploy a running job to a site that comes back (rejoin is off in its JobRecovery)"
FLARE_REASONS = {"client dead": (CLIENT_GONE, "no heartbeat within the server's timeout"),
                 "missing job on client": (JOB_PROCESS_FAILED, "its client runs, but the job is gone from it"),
                 CLIENT_RESTARTED: (RETURNED, "registered again while the job runs")}
"""The reasons FLARE's main process gives when it tells a job that a site is gone, in our words."""


def tolerate_site_job_failures(server: Any) -> None:
    """Make `server` (FLARE's FederatedServer) report a site whose job process failed as dead to that job."""
    fail_job = server.process_job_failure

    def report_dead_site(request: Message) -> Message:
        payload = request.payload if isinstance(request.payload, dict) else {}
        token = request.get_header(CellMessageHeaderKeys.TOKEN)
        client = server.client_manager.clients.get(token) if token else None
        job_id = payload.get(JobFailureMsgKey.JOB_ID)
        if payload.get(JobFailureMsgKey.CODE) not in SITE_JOB_FAILURES or client is None or not job_id:
            return fail_job(request)  # FLARE's own handling, authentication included
        reason = payload.get(JobFailureMsgKey.REASON) or f"exit code {payload.get(JobFailureMsgKey.CODE)}"
        server.engine.job_runner.resolve_client_outcome(job_id, client.name)
        server.engine.notify_dead_job(job_id, client.name, JOB_PROCESS_FAILED_PREFIX + str(reason))
        return make_reply(CellReturnCode.OK, "", None)

    server.cell.register_request_cb(channel=CellChannel.SERVER_MAIN, topic=CellChannelTopic.REPORT_JOB_FAILURE,
                                    cb=report_dead_site)


def record_dead_site_reasons(engine: Any) -> None:
    """Wrap `engine.notify_dead_job` (FLARE's one path for telling a job that a site is gone) so that each reason is
    also recorded for the job's workflow, once per site and reason."""
    notify = engine.notify_dead_job
    told: set[tuple[str, str, str]] = set()

    def notify_and_record(job_id: str, client_name: str, reason: str) -> Any:
        if reason.startswith(JOB_PROCESS_FAILED_PREFIX):
            kind, detail = JOB_PROCESS_FAILED, reason[len(JOB_PROCESS_FAILED_PREFIX):]
        else:
            kind, detail = FLARE_REASONS.get(reason, (CLIENT_GONE, reason))
        if (job_id, client_name, detail) not in told:
            told.add((job_id, client_name, detail))
            append_event(_run_dir(engine, job_id), client_name, kind, detail)
        return notify(job_id, client_name, reason)

    engine.notify_dead_job = notify_and_record


def _run_dir(engine: Any, job_id: str) -> Path:
    return Path(engine.get_workspace().get_run_dir(job_id))


def report_returning_site(engine: Any, site: str) -> None:
    """A site that registers while a job it takes part in runs has restarted, and its job process is gone: report it
    dead to that job (recorded by `record_dead_site_reasons`) until `server_app.rejoin` has started it there again.

    FLARE does not, by itself, when the site comes back within the server's heartbeat timeout (a service manager's
    restart, a quick reboot): registering again gives the client a new token and drops the old one, so the old
    client's heartbeat never times out ("client dead"), and the new one's empty job list is not matched to the job,
    whose participants hold the old token ("missing job on client"). The job's tasks then waited for the site until
    their own timeout (600 s), and once the job ended FLARE failed it, the site having no outcome of the job to
    report. As for a client that died (FLARE's `notify_dead_client`), the site's outcome is settled now. Should the
    site's job process be alive after all, its next request to the job takes it off FLARE's dead-site watch list."""
    for job_id, info in dict(engine.run_processes).items():
        participants = (info or {}).get(RunProcessKey.PARTICIPANTS) or {}
        if any(getattr(client, "name", None) == site for client in participants.values()):
            engine.job_runner.resolve_client_outcome(job_id, site)
            engine.notify_dead_job(job_id, site, CLIENT_RESTARTED)


def record_deployed_job(engine: Any, fl_ctx: FLContext) -> None:
    """The digest of the job being deployed (all its apps, the sites' included), for its checkpoint."""
    job_id = fl_ctx.get_prop(FLContextKey.JOB_RUN_NUMBER)
    job = engine.job_def_manager.get_job(job_id, fl_ctx) if job_id else None
    if job is None:
        return
    apps = {name: job.get_application(name, fl_ctx) for name in job.get_deployment()}
    record_job_digest(Path(engine.get_workspace().get_root_dir()), str(job_id), job_digest(apps))


def _peer_name(fl_ctx: FLContext) -> str:
    peer = fl_ctx.get_peer_context()
    return str(peer.get_identity_name() or "") if peer is not None else ""


class JobRecovery(FLComponent):
    """At server start-up: interrupted jobs are closed with their reason and, with `resume`, cloned to resume;
    with `tolerate_site_failures`, a site's failed job process no longer fails the whole job."""

    def __init__(self, resume: bool = True, tolerate_site_failures: bool = True, rejoin: bool = True):
        super().__init__()
        self.resume = resume
        self.tolerate_site_failures = tolerate_site_failures
        self.rejoin = rejoin
        self._heartbeats = Heartbeats()

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        engine = fl_ctx.get_engine()
        if event_type == EventType.DEPLOY_JOB_TO_SERVER:
            record_deployed_job(engine, fl_ctx)
        elif event_type == EventType.CLIENT_REGISTER_PROCESSED:
            site = _peer_name(fl_ctx)
            if site:
                jobs = jobs_listing(engine, site)
                report_returning_site(engine, site)
                first_heartbeat = self._heartbeats.expect(site)
                for job_id in jobs:
                    if self.rejoin:
                        Rejoin(engine, job_id, site, first_heartbeat, self.logger.info).start()
                    else:  # said, so that no workflow waits for a deploy that will not come
                        append_event(_run_dir(engine, job_id), site, REJOIN_FAILED, REJOIN_OFF)
        elif event_type == EventType.CLIENT_HEARTBEAT_PROCESSED:
            site = _peer_name(fl_ctx)
            if site:
                self._heartbeats.heard(site)
        elif event_type == EventType.SYSTEM_START:
            self._start(engine, fl_ctx)

    def _start(self, engine: Any, fl_ctx: FLContext) -> None:
        """Install the start-up signature fix (server_app.startup_signature), the site-failure handling and the
        heartbeat grace (server_app.heartbeat_grace), then close (and, when resumable, clone) every interrupted job."""
        resign_own_messages_once_identity_loaded(engine.server, self.logger.warning)
        record_dead_site_reasons(engine)
        allow_for_orphan_cleanup(engine.server, self.logger.info)
        if self.tolerate_site_failures:
            tolerate_site_job_failures(engine.server)
        manager = engine.job_def_manager
        root = Path(engine.get_workspace().get_root_dir())
        for job in manager.get_jobs_by_status(list(INTERRUPTED), fl_ctx):
            meta = dict(job.meta)
            update: dict[str, Any] = {REASON_KEY: REASON}
            if self.resume and meta.get(RESUMABLE_KEY):
                clone = manager.clone(from_jid=job.job_id, meta=clone_meta(meta), fl_ctx=fl_ctx)
                update[RESUMED_AS_KEY] = clone.get(JobMetaKey.JOB_ID.value)
                first_run = resumed_run(root, job.job_id) or job.job_id  # a clone of a clone resumes the first run
                record_resumer(root, str(update[RESUMED_AS_KEY]), first_run)
            else:
                update[REASON_KEY] = f"{REASON}; it does not resume by itself: submit it again"
            manager.update_meta(job.job_id, update, fl_ctx)
            manager.set_status(job.job_id, RunStatus.FINISHED_ABNORMAL, fl_ctx)
            resumed = f"; resumed as job {update[RESUMED_AS_KEY]}" if RESUMED_AS_KEY in update else ""
            self.log_warning(
                fl_ctx, f"job {job.job_id} ({meta.get(JobMetaKey.JOB_NAME.value)}): {update[REASON_KEY]}{resumed}"
            )
