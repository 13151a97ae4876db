"""The job kinds an admin can build, by name. Each module defines NAME, build_job(**params) and add_arguments(parser)."""

from __future__ import annotations

import argparse
import importlib
import inspect
from types import ModuleType

JOB_MODULES = {
    "fedavg-linear": "jobs.fedavg_linear.job",
    "fedkt-csd": "jobs.fedkt_csd.job",
    "brats-segmentation": "jobs.segmentation.job",
    "playerfl": "jobs.playerfl.job",
}


def job_module(kind: str) -> ModuleType:
    if kind not in JOB_MODULES:
        raise SystemExit(f"unknown job kind {kind!r}; known kinds: {', '.join(sorted(JOB_MODULES))}")
    return importlib.import_module(JOB_MODULES[kind])


def job_params(module: ModuleType, args: argparse.Namespace) -> dict:
    """The parsed options that are parameters of the module's build_job."""
    names = inspect.signature(module.build_job).parameters
    return {name: value for name, value in vars(args).items() if name in names}
