"""The data-summary job in `fl-demo`, run first as a study would: the glioma sites' data counted before anyone trains
on it, under each site's min_count, and the report page written beside the downloaded results."""

from __future__ import annotations

from federation_tools.admin import JobOutcome
from federation_tools.demo_job import DemoJob
from federation_tools.demos.segmentation import site_data
from jobs.data_summary.spec import KIND, DataSummaryParams
from jobs.segmentation.spec import CPU_DEMO
from reports.data_summary import write_report


def summary(outcome: JobOutcome) -> str:
    download = outcome.server_app_dir().parent.parent  # raises, naming the job, when nothing was downloaded
    results = outcome.results()
    page, _ = write_report(results, download / "report")
    lines = [f"flag: {flag['message']}" for flag in results.get("flags", [])] or [
        "nothing flagged: the sites' data fit the planned segmentation job"]
    return "\n".join([*lines, f"data summary report: {page}",
                      f"(written by: fl-summary-report {download} --out report/)"])


DEMOS = [DemoJob("data-summary", KIND.name,
                 DataSummaryParams(roi_size=CPU_DEMO["roi_size"], min_clients=3), site_data, summary)]
