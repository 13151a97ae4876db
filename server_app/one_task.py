"""A job of one task and no rounds: send every site the same task once and record each site's answer; the held-model
kinds (inference, evaluation) and the data summary are its kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, cast

from nvflare.app_common.abstract.fl_model import FLModel

from server_app.aggregation import missing_sites, scalar_metrics, site_name
from server_app.results import RunRecorder
from server_app.site_watch import LATE_SITE_WAIT_S, SiteAwareController


class OneTaskWorkflow(SiteAwareController):
    """Sends `TASK` with what `task_data` prepares, once, and records each site's answer in results.json
    (`record_sites`); `min_clients` of the sites must answer."""

    TASK: ClassVar[str]
    job: Any
    """The job's parameters (each kind's class; every one has `min_clients`)."""
    WORKFLOW: ClassVar[str]
    """The word for the job in results.json and in its messages ("inference", "evaluation", "data summary")."""

    def header(self) -> dict[str, Any]:
        """What results.json records before anything is sent: the workflow and the job's parameters."""
        raise NotImplementedError

    def task_data(self, recorder: RunRecorder) -> FLModel | None:
        """What the task carries; None after recording why the job cannot send it (the job then fails)."""
        raise NotImplementedError

    def run(self) -> None:
        """One task and no rounds: whatever the task carries is ready before any site is asked, so a job that cannot
        send it fails at the server rather than at every site, and results.json says which sites answered and why
        the others did not. A site that restarted during the task is sent it again once the server has deployed the
        job to it again (`sent_again`), so its part is done before the job ends."""
        recorder = RunRecorder(Path(self.get_app_dir()), self.header())
        data = self.task_data(recorder)
        if data is None:
            return
        results = cast(list[FLModel], self.broadcast_model(data=data, task_name=self.TASK,
                                                           min_responses=int(self.job.min_clients),
                                                           wait_time_after_min_received=LATE_SITE_WAIT_S))
        back = [] if self.abort_signal.triggered else \
            self.rejoined_sites(missing_sites(self.site_names(), {site_name(r) for r in results}))
        if back:  # restarted during the task and deployed the job again: their part is still to do
            self.info(f"{', '.join(back)} back in the job; sending the task to them again")
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
        cause = self.stop_cause(self.WORKFLOW, quiet, int(self.job.min_clients))
        if cause:
            recorder.finish(cause[0], error=cause[1])
        elif len(sites) < int(self.job.min_clients):
            recorder.finish("failed", error=f"{len(sites)} sites answered, the job needs {int(self.job.min_clients)}")
        else:
            recorder.finish("finished")

    def record_sites(self, recorder: RunRecorder, results: list[FLModel]) -> None:
        """Each answering site's scalar metrics under "sites"."""
        recorder.record["sites"] = {site_name(r): scalar_metrics(r) for r in results}
