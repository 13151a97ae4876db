"""The researcher's report over several PLayer-FL job runs (methods x seeds): markdown tables and plots."""

from server_app.report.cli import main, write_report
from server_app.report.ranks import rankings
from server_app.report.runs import Run, load_runs
from server_app.report.table import median_spread, method_table

__all__ = ["Run", "load_runs", "main", "median_spread", "method_table", "rankings", "write_report"]
