"""The researcher's report over several PLayer-FL job runs (methods x seeds): a markdown table and plots."""

from server_app.report.cli import main, write_report
from server_app.report.runs import Run, load_runs
from server_app.report.table import bootstrap_median, method_table

__all__ = ["Run", "bootstrap_median", "load_runs", "main", "method_table", "write_report"]
