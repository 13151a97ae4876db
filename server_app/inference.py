"""Inference workflow: send one global model the server holds locally to every site, which segments its own cases
and answers with counts and timings only.

The admin names the model by key and file name; the federation lead maps the key to a folder in the server's
`local/server_app.json` ("models"), e.g. the `app_server/` folder of a finished segmentation run, whose
`best_global_model.pt` is the model selected on validation. A job never carries a path or weights.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType

from fl_contract.job_params import InferenceParams, job_params
from fl_contract.models import build_model, load_numpy_params
from fl_contract.params import params_to_json
from fl_contract.segmentation import INFERENCE_TASK, MODEL
from server_app.aggregation import missing_sites, scalar_metrics, site_name
from server_app.results import RunRecorder
from server_app.selection import Params
from server_app.server_config import CONFIG_FILE, ServerConfig
from server_app.site_watch import LATE_SITE_WAIT_S, SiteAwareController


class InferenceController(SiteAwareController):
    """Loads `<models[job.model]>/<job.model_file>`, checks it fits MODEL with the job's model arguments, sends it in
    one `infer` task and records each site's counts and timings in results.json."""

    def __init__(self, *, kind: str, params: dict[str, Any]):
        super().__init__()
        self.job: InferenceParams = job_params(kind, params, InferenceParams)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params = kind, params
        self.model_args = self.job.model_args()

    def run(self) -> None:
        """One `infer` task and no rounds: the model is loaded and checked before any site is asked, so a wrong model
        file fails at the server rather than at every site, and results.json says which sites answered and why the
        others did not. A site that restarted during the task is sent it again once the server has deployed the job
        to it again (`sent_again`), so its cases are segmented before the job ends."""
        recorder = RunRecorder(Path(self.get_app_dir()), {"workflow": "inference", **params_to_json(self.job),
                                                          "network": MODEL, "model_args": self.model_args})
        try:
            params, identity = self._load_model()
        except (OSError, ValueError, RuntimeError) as err:
            message = f"server cannot use model {self.job.model!r}/{self.job.model_file}: {err}"
            recorder.finish("failed", error=message)
            self.panic(message)
            return
        recorder.record["model_identity"] = identity
        self.info(f"sending {identity['path']} (sha256 {identity['sha256'][:12]}) to the sites")
        data = FLModel(params=params, params_type=ParamsType.FULL)
        results = cast(list[FLModel], self.broadcast_model(data=data, task_name=INFERENCE_TASK,
                                                           min_responses=self.job.min_clients,
                                                           wait_time_after_min_received=LATE_SITE_WAIT_S))
        back = [] if self.abort_signal.triggered else \
            self.rejoined_sites(missing_sites(self.site_names(), {site_name(r) for r in results}))
        if back:  # restarted during the task and deployed the job again: their cases still need segmenting
            self.info(f"{', '.join(back)} back in the job; sending the model to them again")
            recorder.record["sent_again"] = back
            results += cast(list[FLModel], self.broadcast_model(data=data, task_name=INFERENCE_TASK, targets=back,
                                                                min_responses=len(back),
                                                                wait_time_after_min_received=LATE_SITE_WAIT_S))
        sites = {site_name(r): scalar_metrics(r) for r in sorted(results, key=site_name)}
        recorder.record["sites"] = sites
        recorder.record["no_result"] = missing_sites(self.site_names(), sites)
        quiet = self.quiet_site_outcomes(set(sites))
        if quiet:
            recorder.record["outcomes"] = quiet
        if self.abort_signal.triggered and self.stopped_by_flare:
            recorder.finish("failed", error=self.flare_stop_message("inference", quiet, self.job.min_clients))
        elif self.abort_signal.triggered:
            recorder.finish("aborted", error="aborted during inference")
        elif len(sites) < self.job.min_clients:
            recorder.finish("failed", error=f"{len(sites)} sites answered, the job needs {self.job.min_clients}")
        else:
            recorder.finish("finished")

    def _load_model(self) -> tuple[Params, dict[str, str]]:
        local = Path(self.fl_ctx.get_engine().get_workspace().get_site_config_dir())
        path = ServerConfig.load(local / CONFIG_FILE).model_dir(self.job.model) / self.job.model_file
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist; copy the model there (e.g. a run's best_global_model.pt)")
        state = torch.load(path, weights_only=True, map_location="cpu")
        params = {k: np.asarray(v.numpy()) for k, v in state.items()}
        try:
            load_numpy_params(build_model(MODEL, **self.model_args), params)
        except (ValueError, RuntimeError) as err:
            raise ValueError(f"{path} does not fit {MODEL} with {self.model_args} (the run that made it records "
                             f"its arguments in results.json, job.model_args): {err}") from err
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return params, {"path": str(path), "sha256": digest}
