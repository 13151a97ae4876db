"""Server-side controllers and aggregation. Sees only what sites chose to send; never reads patient data."""

from fl_runtime import process_exit

process_exit.install()  # FLARE waits for a job process to exit: see fl_runtime/process_exit.py
