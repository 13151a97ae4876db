"""The one-task jobs that send one model the server holds (`server_app.held_model`) to every site: inference and
evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from nvflare.app_common.abstract.fl_model import FLModel, ParamsType

from fl_contract.job_params import HeldModelParams, job_params
from fl_contract.params import params_to_json
from server_app.held_model import held_model
from server_app.one_task import OneTaskWorkflow
from server_app.results import RunRecorder


class HeldModelTask(OneTaskWorkflow):
    """Loads `<models[job.model]>/<job.model_file>`, checked against the job's architecture and label map, and sends it
    in the one task (`TASK`)."""

    PARAMS: ClassVar[type[HeldModelParams]]

    def __init__(self, *, kind: str, params: dict[str, Any]):
        super().__init__()
        self.job: HeldModelParams = job_params(kind, params, self.PARAMS)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params = kind, params
        self.network, self.model_args = self.job.model_spec()

    def header(self) -> dict[str, Any]:
        return {"workflow": self.WORKFLOW, **params_to_json(self.job), "network": self.network,
                "model_args": self.model_args}

    def task_data(self, recorder: RunRecorder) -> FLModel | None:
        """The model, loaded and checked before any site is asked, so a wrong model file fails at the server."""
        try:
            params, identity = held_model(Path(self.fl_ctx.get_engine().get_workspace().get_site_config_dir()),
                                          self.job)
        except (OSError, ValueError, RuntimeError) as err:
            message = f"server cannot use model {self.job.model!r}/{self.job.model_file}: {err}"
            recorder.finish("failed", error=message)
            self.panic(message)
            return None
        recorder.record["model_identity"] = identity
        self.info(f"sending {identity['path']} (sha256 {identity['sha256'][:12]}) to the sites")
        return FLModel(params=params, params_type=ParamsType.FULL)
