"""A job of one task and no rounds: send one model the server holds (`server_app.held_model`) to every site and
record each site's answer; inference and evaluation are its kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, cast

from nvflare.app_common.abstract.fl_model import FLModel, ParamsType

from fl_contract.job_params import HeldModelParams, job_params
from fl_contract.params import params_to_json
from server_app.aggregation import missing_sites, scalar_metrics, site_name
from server_app.held_model import held_model
from server_app.results import RunRecorder
from server_app.site_watch import LATE_SITE_WAIT_S, SiteAwareController


class HeldModelTask(SiteAwareController):
    """Loads `<models[job.model]>/<job.model_file>`, checked against the job's architecture and label map, sends it
    in one task (`TASK`) and records each site's answer in results.json (`record_sites`)."""

    PARAMS: ClassVar[type[HeldModelParams]]
    TASK: ClassVar[str]
    WORKFLOW: ClassVar[str]
    """The word for the job in results.json and in its messages ("inference", "evaluation")."""

    def __init__(self, *, kind: str, params: dict[str, Any]):
        super().__init__()
        self.job: HeldModelParams = job_params(kind, params, self.PARAMS)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params = kind, params
        self.network, self.model_args = self.job.model_spec()

    def run(self) -> None:
        """One task and no rounds: the model is loaded and checked before any site is asked, so a wrong model file
        fails at the server rather than at every site, and results.json says which sites answered and why the
        others did not. A site that restarted during the task is sent it again once the server has deployed the job
        to it again (`sent_again`), so its cases are done before the job ends."""
        recorder = RunRecorder(Path(self.get_app_dir()), {"workflow": self.WORKFLOW, **params_to_json(self.job),
                                                          "network": self.network, "model_args": self.model_args})
        try:
            params, identity = held_model(Path(self.fl_ctx.get_engine().get_workspace().get_site_config_dir()),
                                          self.job)
        except (OSError, ValueError, RuntimeError) as err:
            message = f"server cannot use model {self.job.model!r}/{self.job.model_file}: {err}"
            recorder.finish("failed", error=message)
            self.panic(message)
            return
        recorder.record["model_identity"] = identity
        self.info(f"sending {identity['path']} (sha256 {identity['sha256'][:12]}) to the sites")
        data = FLModel(params=params, params_type=ParamsType.FULL)
        results = cast(list[FLModel], self.broadcast_model(data=data, task_name=self.TASK,
                                                           min_responses=self.job.min_clients,
                                                           wait_time_after_min_received=LATE_SITE_WAIT_S))
        back = [] if self.abort_signal.triggered else \
            self.rejoined_sites(missing_sites(self.site_names(), {site_name(r) for r in results}))
        if back:  # restarted during the task and deployed the job again: their cases are still to do
            self.info(f"{', '.join(back)} back in the job; sending the model to them again")
            recorder.record["sent_again"] = back
            results += cast(list[FLModel], self.broadcast_model(data=data, task_name=self.TASK, targets=back,
                                                                min_responses=len(back),
                                                                wait_time_after_min_received=LATE_SITE_WAIT_S))
        answered = sorted(results, key=site_name)
        self.record_sites(recorder, answered)
        sites = {site_name(r) for r in answered}
        recorder.record["no_result"] = missing_sites(self.site_names(), sites)
        quiet = self.quiet_site_outcomes(sites)
        if quiet:
            recorder.record["outcomes"] = quiet
        cause = self.stop_cause(self.WORKFLOW, quiet, self.job.min_clients)
        if cause:
            recorder.finish(cause[0], error=cause[1])
        elif len(sites) < self.job.min_clients:
            recorder.finish("failed", error=f"{len(sites)} sites answered, the job needs {self.job.min_clients}")
        else:
            recorder.finish("finished")

    def record_sites(self, recorder: RunRecorder, results: list[FLModel]) -> None:
        """Each answering site's scalar metrics under "sites"."""
        recorder.record["sites"] = {site_name(r): scalar_metrics(r) for r in results}
