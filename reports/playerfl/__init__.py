"""The researcher's report over several PLayer-FL job runs (methods x seeds): markdown tables and plots."""

from reports.playerfl.cli import main, write_report
from reports.playerfl.ranks import rankings
from reports.playerfl.runs import Run, load_runs
from reports.playerfl.table import median_spread, method_table

__all__ = ["Run", "load_runs", "main", "median_spread", "method_table", "rankings", "write_report"]
