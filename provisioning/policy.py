"""The security policy written into every startup kit: exact class allow-lists, authorization, site guard.

The allow-lists name exact classes, never package prefixes: FLARE matches entries as prefixes, and a package
prefix admits every callable reachable through our modules (imported helpers included).
"""

from __future__ import annotations

from nvflare.app_common.logging.job_log_receiver import JobLogReceiver
from nvflare.app_common.logging.job_log_streamer import JobLogStreamer
from nvflare.app_common.widgets.convert_to_fed_event import ConvertToFedEvent
from nvflare.app_opt.tracking.tb.tb_receiver import TBAnalyticsReceiver
from nvflare.app_opt.tracking.tb.tb_writer import TBWriter

from server_app.fedavg import FedAvgController
from server_app.fedkt_csd import FedKTCSDController
from server_app.playerfl import PLayerFLController
from site_agent.site_guard import SiteGuard
from site_agent.tasks.fedkt_csd import FedKTCSDTask
from site_agent.tasks.linear_regression import LinearRegressionTask
from site_agent.tasks.playerfl import PLayerFLTask
from site_agent.tasks.segmentation import SegmentationTask

DEFAULT_ACCEPTED_ROLES = ["project_admin", "lead"]


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# Classes a job may instantiate at a site: our site tasks, and FLARE's log streamer that sites add to every job.
SITE_JOB_CLASSES = [LinearRegressionTask, JobLogStreamer, PLayerFLTask, FedKTCSDTask]
# Segmentation: its task, and FLARE's experiment tracking (TensorBoard writer, local -> federated event relay).
SITE_JOB_CLASSES += [SegmentationTask, TBWriter, ConvertToFedEvent]
# Classes a job may instantiate on the server: our workflows and FLARE's log receiver.
SERVER_JOB_CLASSES = [FedAvgController, JobLogReceiver, PLayerFLController, FedKTCSDController]
SERVER_JOB_CLASSES += [TBAnalyticsReceiver]  # segmentation: FLARE's TensorBoard receiver


def site_allow_list() -> list[str]:
    return sorted(class_path(c) for c in SITE_JOB_CLASSES)


def server_allow_list() -> list[str]:
    return sorted(class_path(c) for c in SERVER_JOB_CLASSES)


def site_guard_component(accepted_roles: list[str]) -> dict:
    return {"id": "site_guard", "path": class_path(SiteGuard), "args": {"accepted_submitter_roles": list(accepted_roles)}}


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
