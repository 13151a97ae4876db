"""The security policy written into every startup kit: exact class allow-lists, authorization, site guard, and each
site's default privacy policy (site_agent.privacy.policy, which the hospital then edits).

The class allow-lists come from the job kinds (jobs.registry). They name exact classes, never package prefixes:
FLARE matches entries as prefixes, and a package prefix admits every callable reachable through our modules
(imported helpers included).
"""

from __future__ import annotations

from typing import Any

from jobs.registry import kinds, site_allow_list
from site_agent.kit.kit_policy import SiteKitPolicy
from site_agent.privacy.job_contents import SITE_DEPLOYER_PATH
from site_agent.privacy.policy import SitePolicy
from site_agent.privacy.site_guard import SITE_GUARD_PATH

DEFAULT_ACCEPTED_ROLES = list(SitePolicy().accepted_submitter_roles)
JOB_RECOVERY = "server_app.recovery.JobRecovery"
SERVER_HEARTBEAT_TIMEOUT_S = 20
"""A site whose client sends no heartbeat (every 10 s) for this long is gone; FLARE's kits say 600."""
SERVER_ADMIN_TIMEOUT_S = 30.0
"""How long the server waits for a site's reply to a request it sends every site, the job's deployment among them
(FLARE's `admin_timeout`: 10 s). A site whose client is short of CPU (its GPU server busy, or a job process and the
next job's warm process importing torch beside it) answered a deployment after more than 10 s and was left out of
the job ("no reply (deployment timeout)"; 3 of 4 runs of a segmentation test at load average 10 on 2 cores). The
cost: a site that died unnoticed holds up a job's start by up to this long, not 10 s."""


COMM_CONFIG: dict[str, float] = {"streaming_retry_wait": 60.0, "streaming_retry_timeout": 600.0}
"""Every kit's local/comm_config.json: FLARE's streaming settings that let a slow link take part (measured at 1 and 2
Mbit/s; by the arithmetic below, a 2 MB answer acknowledged within 60 s, down to about 0.3 Mbit/s). FLARE sends every
answer to a site's download request (a 2 MB chunk of the model, both ways: the server pulls a site's update the same
way) as a reliable stream and re-sends a 1 MB piece whose acknowledgement has not come back within
`streaming_retry_wait` (FLARE: 5 s), failing the stream `streaming_retry_timeout` (FLARE: 60 s) after the first
re-send. On a 1 Mbit/s link one chunk takes 16 s, so every piece was re-sent, the copies filled the link and every
download of a 19 MB model failed ("retry failed after 60.00 seconds"), the site starting again from scratch. TCP
already delivers what is sent on a live connection; FLARE's re-send only matters after a reconnect, so waiting 60 s
before it costs a slow link nothing and a broken connection a minute; 600 s lets a transfer ride out a 10-minute
outage."""


SITE_ADMISSION = "server_app.admission.SiteAdmission"
SCHEDULE_INTERVAL_S = 5.0
"""How often the server retries a job that waits for sites: it starts within this (plus a second) of their return.
FLARE's scheduler backs off from 10 s to 600 s, so a job waited minutes after a missing site came back."""
SCHEDULE_TRIES = 720
"""A job still waiting after this many tries (an hour at SCHEDULE_INTERVAL_S) ends FINISHED:CAN_NOT_SCHEDULE."""


def site_admission_component() -> dict[str, Any]:
    """The server component that refuses every site and admin the project does not list (server_app.admission)."""
    return {"id": "site_admission", "path": SITE_ADMISSION, "args": {}}


JOB_SCHEDULER = "server_app.scheduler.NamingJobScheduler"


def job_scheduler(kit_scheduler: dict[str, Any]) -> dict[str, Any]:
    """The server's `job_scheduler`: FLARE's DefaultJobScheduler naming the sites a waiting job lacks
    (server_app.scheduler), retrying every SCHEDULE_INTERVAL_S; the kit's other arguments (`max_jobs`) stay."""
    args = {**kit_scheduler.get("args", {}), "min_schedule_interval": SCHEDULE_INTERVAL_S,
            "max_schedule_interval": SCHEDULE_INTERVAL_S, "max_schedule_count": SCHEDULE_TRIES}
    return {**kit_scheduler, "path": JOB_SCHEDULER, "args": args}


def job_recovery_component(resume: bool = True) -> dict[str, Any]:
    """The server component that closes and resumes the jobs a server restart interrupted (server_app.recovery)."""
    return {"id": "job_recovery", "path": JOB_RECOVERY, "args": {"resume": resume}}


def site_guard_component() -> dict[str, Any]:
    """The guard, told which site task each job kind runs (so a job cannot run one kind's task as another kind)."""
    return {"id": "site_guard", "path": SITE_GUARD_PATH,
            "args": {"kind_tasks": {name: kind.site_task for name, kind in kinds().items()}}}


def site_deployer_component() -> dict[str, Any]:
    """The site's deployer, which refuses at deploy a job that carries code or contradicts the site
    (site_agent.privacy.job_contents): told each kind's site task and which of its arguments are dataset keys."""
    return {"id": "app_deployer", "path": SITE_DEPLOYER_PATH,
            "args": {"kind_tasks": {name: kind.site_task for name, kind in kinds().items()},
                     "dataset_keys": {name: list(kind.dataset_keys) for name, kind in kinds().items()}}}


SITE_JOB_LAUNCHER = "fl_runtime.job_launcher.WarmClientJobLauncher"
SERVER_JOB_LAUNCHER = "fl_runtime.job_launcher.WarmServerJobLauncher"


def job_launcher_component(launcher: str, classes: list[str]) -> dict[str, Any]:
    """A kit's `process_launcher` (FLARE's id, kept): the warm launcher of fl_runtime.job_launcher, its warm
    process importing ahead the modules of `classes`, those a job of a registered kind may build on that side."""
    return {"id": "process_launcher", "path": launcher,
            "args": {"preload": sorted({path.rpartition(".")[0] for path in classes})}}


OPERATOR_COMMANDS = ("check_status", "restart", "shutdown")
"""Admin commands a provisioned site lets `project_admin` run: see whether it is up, restart or stop its client
(the demo and the tests stop a loopback federation with `shutdown all`). Nothing is read or configured."""


def default_site_policy(accepted_roles: list[str]) -> SitePolicy:
    """Every registered job kind, the given submitter roles, no remote shell, project_admin may check, restart and
    stop the site's client; the other fields at their defaults."""
    return SitePolicy(allowed_job_kinds=tuple(kinds()), accepted_submitter_roles=tuple(accepted_roles),
                      admin_command_roles={command: ("project_admin",) for command in OPERATOR_COMMANDS})


# Every right written out: FLARE's "any" for a role would include byoc (custom code in jobs).
_ADMIN_RIGHTS = ["submit_job", "clone_job", "manage_job", "download_job", "view", "operate", "shell_commands"]


def authorization_policy() -> dict[str, Any]:
    project_admin = {right: "any" for right in _ADMIN_RIGHTS}
    org_admin = {"submit_job": "none", "clone_job": "none", "manage_job": "o:submitter", "download_job": "o:submitter",
                 "view": "any", "operate": "o:site", "shell_commands": "o:site"}
    lead = {"submit_job": "any", "clone_job": "n:submitter", "manage_job": "n:submitter", "download_job": "n:submitter",
            "view": "any", "operate": "o:site", "shell_commands": "o:site"}
    member = {"view": "any"}
    roles = {"project_admin": project_admin, "org_admin": org_admin, "lead": lead, "member": member}
    for rights in roles.values():
        rights["byoc"] = "none"
        rights["server-predeployed-flwr"] = "none"
    return {"format_version": "1.0", "permissions": roles}


def site_kit_policy(accepted_roles: list[str], stream_logs: bool = False, warm_jobs: bool = True) -> SiteKitPolicy:
    """Every site kit's policy (site_agent.kit.kit_policy): the exact allow-list of the registered job kinds, the site
    guard and deployer (which refuses at deploy a job that carries code), FLARE's log streaming off unless asked for,
    the warm job launcher unless not asked for, the slow-link settings, no byoc right, and the default privacy
    policy accepting jobs from `accepted_roles`."""
    launcher = job_launcher_component(SITE_JOB_LAUNCHER, site_allow_list()) if warm_jobs else None
    return SiteKitPolicy(tuple(site_allow_list()), (site_guard_component(), site_deployer_component()), launcher,
                         stream_logs, dict(COMM_CONFIG), authorization_policy(),
                         default_site_policy(accepted_roles).to_json())
