"""The hospital site agent: everything that touches patient data runs here, inside the hospital."""

from fl_contract.version import AGENT_VERSION as __version__

__all__ = ["__version__"]
