"""Build and export a job of any kind: a FedJob that ships no code and records the agent version it was built for."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, cast

from nvflare.job_config.api import FedJob
from nvflare.job_config.defs import FilterType

from fl_contract.fedkt_csd.protocol import TASK_STATISTICS
from fl_contract.job_meta import RESUMABLE_KEY
from fl_contract.job_privacy import SitePrivacy, release_of
from fl_contract.masked_weights import TASK_MASKED
from fl_contract.params import FederationParams, JobParams
from fl_contract.version import AGENT_VERSION, AGENT_VERSION_KEY
from jobs.registry import server_allow_list, site_allow_list
from jobs.spec import JobKind
from server_app.privacy.addressed_ciphertexts import AddressedCiphertexts
from server_app.transfers import METER_ID, TransferMeter
from site_agent.tasks.transfers import TaskClock

APP_PACKAGES = ["fl_contract", "site_agent", "server_app"]
DEAD_SITE_CHECK_LEAD_S = 3.0
"""FLARE checks whether a task waits only for dead sites this long after the task was sent (its default is 30 s).
Every round sent while a site is already deemed gone waits this long for it once the others have answered, which
for a short round is most of its time. The lead guards against a race
that `dead_site_grace_s` covers already (a site reported gone is deemed gone only after the grace, and any request
it sends the job in between takes it off FLARE's watch list), so 3 s leaves it a margin of six task requests."""
TASK_REQUEST_INTERVAL_S = 0.5
"""How long a site waits after each task, and after each request the server had no task for, before asking again.
FLARE's default is 2 s: every task of a round then ends >= 2 s before the site can take the next one, 8 s of idle
time per masked round (four tasks) and per FedKT-CSD secure sum. The cost is idle
polling: a site waiting for a slower one asks twice a second (one small HTTPS request each), so a federation of
1000 sites would send the server about 2000 requests a second while a round waits; the hospital federations this
agent is for have tens of sites."""


def new_job(name: str, min_clients: int, privacy: SitePrivacy, resumable: bool = False) -> FedJob:
    """A FedJob whose components are referenced by import path from the installed packages (no `custom/`); its meta
    records the agent version, what the job declares to sites (sites decide from the meta and the configuration
    at deploy, before it starts), and whether the server may resume it after a restart."""
    meta = {AGENT_VERSION_KEY: AGENT_VERSION, RESUMABLE_KEY: resumable, **privacy.meta()}
    job = FedJob(name=name, min_clients=min_clients, meta_props=meta)
    job.set_app_packages(APP_PACKAGES)
    job.to_server({"server": {"task_request_interval": TASK_REQUEST_INTERVAL_S}})
    return job


def build_job(kind: JobKind[Any], params: JobParams | None = None) -> FedJob:
    """The FedJob of `kind` with `params` (the kind's defaults when None); imports the kind's classes."""
    params = params if params is not None else kind.params()
    if not isinstance(params, kind.params):
        raise TypeError(f"{kind.name} takes {kind.params.__name__}, got {type(params).__name__}")
    extras = kind.extras(params)
    site_task = kind.site_task_component(params).instantiate()
    privacy = SitePrivacy.declare(kind.name, release_of(type(site_task)), dataclasses.asdict(params))
    job = new_job(kind.name_for(params), int(getattr(params, "min_clients", 1)), privacy, kind.resumable)
    if isinstance(params, FederationParams):  # FLARE's own dead-client handling, as job configuration variables
        job.to_server({"dead_client_grace_period": params.dead_site_grace_s,
                       "dead_client_check_lead_time": DEAD_SITE_CHECK_LEAD_S})
    job.to_server(kind.controller_component(params).instantiate())
    for extra in extras.server:
        job.to_server(extra.instantiate(), id=extra.id)
    job.to_clients(site_task)
    for extra in extras.site:
        job.to_clients(extra.instantiate(), id=extra.id)
    job.to_server(TransferMeter(), id=METER_ID)  # bytes and transfer time per site and round
    job.to_server(AddressedCiphertexts(), id="addressed_ciphertexts", filter_type=FilterType.TASK_DATA,
                  tasks=[TASK_MASKED, TASK_STATISTICS])  # each site gets only its own secure-aggregation ciphertexts
    job.to_clients(TaskClock(), id="task_clock")
    return job


def export(job: FedJob, out_dir: Path) -> Path:
    """Write the job folder an admin can `submit_job`.

    Refuses, before anyone submits it, a job that sites would refuse: one that ships code, or one naming a class
    outside the provisioned allow-lists.
    """
    out_dir = Path(out_dir)
    job.export_job(str(out_dir))
    job_dir = out_dir / cast(str, job.name)  # FLARE is untyped; a FedJob's name is a str
    shipped = sorted(str(p.relative_to(job_dir)) for p in job_dir.rglob("custom") if p.is_dir())
    if shipped:
        raise RuntimeError(f"job {job.name} would ship code in {shipped}; sites refuse such jobs")
    for side, allowed in (("client", site_allow_list()), ("server", server_allow_list())):
        for config in job_dir.glob(f"*/config/config_fed_{side}.json"):
            outside = sorted(set(_class_paths(json.loads(config.read_text()))) - set(allowed))
            if outside:
                raise RuntimeError(f"job {job.name} uses {outside} in {config.relative_to(out_dir)}, which the "
                                   "provisioned allow-lists do not admit; declare the classes in the job kind's spec "
                                   "(jobs/<kind>/spec.py) and re-provision the kits")
    return job_dir


def _class_paths(config: dict[str, Any]) -> list[str]:
    """Every component class a FLARE app config instantiates (executors, workflows, components, filters)."""
    entries = ([e["executor"] for e in config.get("executors", [])] + config.get("workflows", [])
               + config.get("components", []))
    for key in ("task_data_filters", "task_result_filters"):
        entries += [f for group in config.get(key, []) for f in group.get("filters", [])]
    return [e["path"] for e in entries if "path" in e]
