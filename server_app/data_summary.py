"""Data-summary workflow: one `summarize` task; each site answers with its summary's JSON text (counts of at least its
`min_count` cases per cell, quantiles over at least that many), which the server keeps byte for byte in
`site_summaries/<site>.json` of its job folder, and combines in results.json: each site's summary, the federation's
pooled view and the flags an admin acts on before training (`fl_contract.data_summary.flags`). `fl-summary-report`
renders results.json as a page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType

from fl_contract import data_summary as ds
from fl_contract.job_params import DataSummaryParams, job_params
from fl_contract.params import params_to_json
from server_app.aggregation import site_name
from server_app.one_task import OneTaskWorkflow
from server_app.results import RunRecorder

SITE_SUMMARIES = "site_summaries"
"""The folder of the job's server app where each site's summary is kept as the bytes it sent."""


class DataSummaryController(OneTaskWorkflow):
    TASK = ds.SUMMARY_TASK
    WORKFLOW = "data summary"

    def __init__(self, *, kind: str, params: dict[str, Any]):
        super().__init__()
        self.job = job_params(kind, params, DataSummaryParams)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params = kind, params

    def header(self) -> dict[str, Any]:
        return {"workflow": self.WORKFLOW, **params_to_json(self.job)}

    def task_data(self, recorder: RunRecorder) -> FLModel | None:
        return FLModel(params={}, params_type=ParamsType.FULL, meta={"format": ds.FORMAT})

    def record_sites(self, recorder: RunRecorder, results: list[FLModel]) -> None:
        """Each site's summary as it sent it (a file per site) and as read, a site whose answer is not a summary of
        this job named with the reason, then the pooled view and the flags."""
        folder = Path(self.get_app_dir()) / SITE_SUMMARIES
        folder.mkdir(parents=True, exist_ok=True)
        summaries: dict[str, dict[str, Any]] = {}
        unreadable: dict[str, str] = {}
        for result in results:
            site, sent = site_name(result), (result.params or {}).get(ds.SUMMARY_META)
            if not isinstance(sent, np.ndarray) or sent.dtype != np.uint8 or sent.ndim != 1:
                unreadable[site] = "its answer holds no data summary"
                continue
            (folder / f"{site}.json").write_bytes(sent.tobytes())
            try:
                summary = json.loads(sent.tobytes().decode())
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                unreadable[site] = f"its summary is not JSON ({err})"
                continue
            if summary.get("format") != ds.FORMAT or summary.get("params") != self.job.content():
                unreadable[site] = (f"its summary is of format {summary.get('format')!r} with parameters "
                                    f"{summary.get('params')}, not this job's")
                continue
            summaries[site] = summary
        recorder.record["sites"] = summaries
        if unreadable:
            recorder.record["unreadable"] = unreadable
        recorder.record["federation"] = ds.pooled(summaries)
        recorder.record["flags"] = [f.to_json() for f in ds.flags(summaries, self.job.content())]
        for flag in recorder.record["flags"]:
            self.info(f"flag: {flag['message']}")
