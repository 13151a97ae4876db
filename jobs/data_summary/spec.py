"""Know the federation's data before training: each site counts its cases as a training job with these parameters
would read them, under its policy's min_count (and DP noise if asked), and the server combines the counts into one
report with the flags an admin acts on. See docs/data-summary.md.
"""

from __future__ import annotations

from fl_contract.job_params import DataSummaryParams
from jobs.spec import JobKind

KIND = JobKind(
    name="data-summary",
    summary="Count what every site's data holds before training (modalities, voxel grids, scanners, intensities, "
            "label conventions, tumour sizes; ISIC classes, image sizes, colours): cells of at least each site's "
            "min_count cases, optional DP noise; the report flags what a training job would not fit",
    params=DataSummaryParams,
    controller="server_app.data_summary.DataSummaryController",
    site_task="site_agent.tasks.data_summary.DataSummaryTask",
    dataset_keys=("dataset", "reviewed_summary"),
    resumable=False,  # one task: resubmit it
    guide="docs/data-summary.md",
)

__all__ = ["KIND", "DataSummaryParams"]
