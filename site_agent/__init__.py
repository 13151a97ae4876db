"""The hospital site agent: everything that touches patient data runs here, inside the hospital."""

from fl_contract.version import AGENT_VERSION as __version__
from fl_runtime import process_exit

process_exit.install()  # FLARE waits for a job process to exit: see fl_runtime/process_exit.py

__all__ = ["__version__"]
