"""A PLayer-FL job run in one process: the job's own controller and site tasks, FLARE's messaging replaced by calls.

Why: FLARE's simulator costs minutes a run on 2 CPU cores (bench/README.md has the numbers),
and the reproduction harness needs about 70 runs (methods x learning rates x seeds). The classes and constructor
arguments are exactly the exported job's (`KIND.controller_component`, `KIND.site_task_component`); replaced are
only the transport (each site's task is called in turn, in site-name order, on a copy of the message), the per-task
torch seeding FLARE's executor does (repeated here), and the controller's engine (site names, workspace folder).
A failing job raises `JobFailed` with the controller's reason. The simulator test runs the same job through FLARE.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.job_def import JobMetaKey
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel

from jobs.playerfl.spec import KIND, PLayerFLParams
from jobs.spec import import_class
from server_app.results import RESULTS_FILE
from site_agent.kit.site_config import SiteConfig
from site_agent.tasks.executor import SiteContext


class JobFailed(RuntimeError):
    """The controller stopped the job (FLARE's panic); the message is its reason."""


@dataclass(frozen=True)
class _Client:
    name: str


class _Workspace:
    def __init__(self, root: Path):
        self.root = root

    def get_root_dir(self) -> str:
        return str(self.root / "server")


class _Engine:
    """What the controller asks FLARE's engine for: the sites and the server's workspace."""

    def __init__(self, sites: list[str], root: Path):
        self.clients = [_Client(site) for site in sites]
        self.workspace = _Workspace(root)

    def get_clients(self) -> list[_Client]:
        return self.clients

    def get_workspace(self) -> _Workspace:
        return self.workspace

    def get_component(self, component_id: str) -> None:
        return None  # no FLARE components in one process (the transfer meter measures FLARE's transport)


class _Communicator:
    """FLARE's view of site connections: in one process no site ever disconnects."""

    def get_client_disconnect_time(self, site: str) -> float | None:
        return None


def run_in_process(params: PLayerFLParams, sites: Mapping[str, Path], workspace: Path,
                   received: list[tuple[str, FLModel]] | None = None) -> Path:
    """Run the job `params` describes over `sites` (name -> ISIC folder); returns its results.json. Every answer
    the server is given is appended to `received` (task name, answer as sent), to check what leaves a site."""
    if params.tracking:
        raise ValueError("in-process runs have no FLARE tracking components: set tracking=False")
    workspace = Path(workspace)
    names = sorted(sites)
    contexts = {site: SiteContext(site,
                                  SiteConfig(workspace / site / "site_agent.json", {params.dataset: str(sites[site])}),
                                  torch.device("cpu"), workspace / site, Signal()) for site in names}
    tasks = {site: KIND.site_task_component(params).instantiate() for site in names}
    app_dir = workspace / "server" / "app_server"

    def broadcast_model(task_name: str = "train", data: FLModel | None = None, targets: list[str] | None = None,
                        **_: Any) -> list[FLModel]:
        results = []
        for site in targets or names:
            torch.manual_seed(tasks[site].seed)  # as FLARE's executor does before every task
            result: FLModel = tasks[site].answer(task_name, copy.deepcopy(data), contexts[site])
            if received is not None:
                received.append((task_name, copy.deepcopy(result)))
            result.meta = {**(result.meta or {}), "client_name": site}
            results.append(result)
        return results

    def panic(reason: str, *_: Any) -> None:
        raise JobFailed(reason)

    component = KIND.controller_component(params)
    controller = import_class(component.path)(**component.args)
    controller.broadcast_model = broadcast_model  # every task the workflow sends (RoundWorkflow.send)
    controller.panic = panic
    controller.get_app_dir = lambda: str(app_dir)
    controller.engine = _Engine(names, workspace)
    controller.communicator = _Communicator()
    controller.fl_ctx = FLContext()
    controller.fl_ctx.set_prop(FLContextKey.JOB_META, {JobMetaKey.JOB_NAME.value: KIND.name_for(params)}, private=True,
                               sticky=False)
    controller.abort_signal = Signal()
    controller.run()
    return app_dir / RESULTS_FILE
