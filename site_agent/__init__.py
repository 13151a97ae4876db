"""The hospital site agent: everything that touches patient data runs here, inside the hospital."""

__version__ = "0.1.0"
