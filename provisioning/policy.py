"""The security policy written into every startup kit: exact class allow-lists, authorization, site guard.

The allow-lists name exact classes, never package prefixes: FLARE matches entries as prefixes, and a package
prefix admits every callable reachable through our modules (imported helpers included).
"""

from __future__ import annotations

from jobs.registry import server_classes, site_classes
from site_agent.site_guard import SITE_GUARD_PATH

DEFAULT_ACCEPTED_ROLES = ["project_admin", "lead"]
# FLARE adds these to every job: sites stream job logs (unless switched off), the server receives them.
JOB_LOG_STREAMER = "nvflare.app_common.logging.job_log_streamer.JobLogStreamer"
JOB_LOG_RECEIVER = "nvflare.app_common.logging.job_log_receiver.JobLogReceiver"


def site_allow_list() -> list[str]:
    """Exact classes a job may instantiate at a site: every registered job kind's, and FLARE's log streamer."""
    return sorted({*site_classes(), JOB_LOG_STREAMER})


def server_allow_list() -> list[str]:
    """Exact classes a job may instantiate on the server: every registered job kind's, and FLARE's log receiver."""
    return sorted({*server_classes(), JOB_LOG_RECEIVER})


def site_guard_component(accepted_roles: list[str]) -> dict:
    return {"id": "site_guard", "path": SITE_GUARD_PATH, "args": {"accepted_submitter_roles": list(accepted_roles)}}


# Every right written out: FLARE's "any" for a role would include byoc (custom code in jobs).
_ADMIN_RIGHTS = ["submit_job", "clone_job", "manage_job", "download_job", "view", "operate", "shell_commands"]


def authorization_policy() -> dict:
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
