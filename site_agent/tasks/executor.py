"""Thin FLARE glue for site tasks: Shareable <-> FLModel, site context, clear errors.

Site tasks are installed classes (no job-shipped code), so they subclass FLARE's `Executor` directly rather than
using the Client API's `ScriptRunner`, which copies a script into the job (BYOC). A task implements `train`
(and optionally other task names) as plain methods on `FLModel`; everything FLARE-specific stays here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from nvflare.apis.executor import Executor
from nvflare.apis.fl_constant import ReturnCode
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable, make_reply
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel
from nvflare.app_common.utils.fl_model_utils import FLModelUtils

from fl_contract.device import describe_device, select_device
from site_agent.site_config import CONFIG_FILE, SiteConfig


@dataclass(frozen=True)
class SiteContext:
    """What a task may know about where it runs: its name, its configured data, its device, its workspace."""

    site_name: str
    config: SiteConfig
    device: torch.device
    workspace_dir: Path
    abort_signal: Signal

    def data_dir(self, dataset: str) -> Path:
        return self.config.data_dir(dataset, self.site_name)


class TaskExecutor(Executor):
    """Dispatches FLARE task names to methods `task_<name>(model, ctx) -> FLModel` of the subclass."""

    def __init__(self, seed: int):
        super().__init__()
        self.seed = seed

    def site_context(self, fl_ctx: FLContext, abort_signal: Signal) -> SiteContext:
        workspace = fl_ctx.get_engine().get_workspace()
        config = SiteConfig.load(Path(workspace.get_site_config_dir()) / CONFIG_FILE)
        device = select_device(config.device)
        return SiteContext(
            site_name=fl_ctx.get_identity_name(),
            config=config,
            device=device,
            workspace_dir=Path(workspace.get_root_dir()),
            abort_signal=abort_signal,
        )

    def execute(self, task_name: str, shareable: Shareable, fl_ctx: FLContext, abort_signal: Signal) -> Shareable:
        handler = getattr(self, f"task_{task_name}", None)
        if handler is None:
            self.log_error(fl_ctx, f"{type(self).__name__} has no task {task_name!r}")
            return make_reply(ReturnCode.TASK_UNKNOWN)
        try:
            ctx = self.site_context(fl_ctx, abort_signal)
            self.log_info(fl_ctx, f"task {task_name}: running on {describe_device(ctx.device)}")
            torch.manual_seed(self.seed)
            result = handler(FLModelUtils.from_shareable(shareable), ctx)
        except Exception as exc:  # the reason must reach the site's log and the admin, not vanish in a traceback
            self.log_exception(fl_ctx, f"task {task_name} failed at site {fl_ctx.get_identity_name()}: {exc}")
            return make_reply(ReturnCode.EXECUTION_EXCEPTION)
        if abort_signal.triggered:
            return make_reply(ReturnCode.TASK_ABORTED)
        return FLModelUtils.to_shareable(result)

    def task_train(self, model: FLModel, ctx: SiteContext) -> FLModel:
        raise NotImplementedError
