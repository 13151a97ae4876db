"""The job kinds an admin can build, by name: one spec module per kind (`jobs/<kind>/spec.py`, attribute KIND).

Everything derived from job kinds (CLI, export, allow-lists, demo, docs tables) reads this registry, so a new kind
is one spec module added to SPEC_MODULES, or `register(kind)` for a kind defined elsewhere.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fl_contract.job_params import registered_params
from jobs.spec import JobKind

SPEC_MODULES = (
    "jobs.fedavg_linear.spec",
    "jobs.fedkt_csd.spec",
    "jobs.segmentation.spec",
    "jobs.inference.spec",
    "jobs.evaluation.spec",
    "jobs.isic_evaluation.spec",
    "jobs.playerfl.spec",
    "jobs.data_summary.spec",
)
_KINDS: dict[str, JobKind[Any]] = {}


def kinds() -> dict[str, JobKind[Any]]:
    """Every registered job kind by name, sorted by name."""
    if not _KINDS:
        for module in SPEC_MODULES:
            kind = importlib.import_module(module).KIND
            _KINDS[kind.name] = kind
    return dict(sorted(_KINDS.items()))


def job_kind(name: str) -> JobKind[Any]:
    known = kinds()
    if name not in known:
        raise KeyError(f"unknown job kind {name!r}; known kinds: {', '.join(known)}")
    return known[name]


def register(kind: JobKind[Any]) -> None:
    kinds()
    if kind.name in _KINDS:
        raise ValueError(f"job kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind


@contextmanager
def registered(kind: JobKind[Any]) -> Iterator[JobKind[Any]]:
    """A job kind registered for the duration of a `with` block (tests, plug-ins trying a kind out), its parameters
    too, so that its components can rebuild them."""
    register(kind)
    try:
        with registered_params(kind.name, kind.params):
            yield kind
    finally:
        del _KINDS[kind.name]


# FLARE adds these to every job: sites stream job logs (unless switched off), the server receives them.
JOB_LOG_STREAMER = "nvflare.app_common.logging.job_log_streamer.JobLogStreamer"
JOB_LOG_RECEIVER = "nvflare.app_common.logging.job_log_receiver.JobLogReceiver"
# ... and we add these to every job: per site and round, bytes and transfer time (server_app.transfers).
TRANSFER_METER = "server_app.transfers.TransferMeter"
ADDRESSED_CIPHERTEXTS = "server_app.privacy.addressed_ciphertexts.AddressedCiphertexts"
TASK_CLOCK = "site_agent.tasks.transfers.TaskClock"


def site_classes() -> list[str]:
    """Every class a job of a registered kind may instantiate at a site."""
    return sorted({k.site_task for k in kinds().values()} | {c for k in kinds().values() for c in k.site_classes})


def server_classes() -> list[str]:
    """Every class a job of a registered kind may instantiate on the server."""
    return sorted({k.controller for k in kinds().values()} | {c for k in kinds().values() for c in k.server_classes})


def site_allow_list() -> list[str]:
    """Exact classes a job may instantiate at a site: every registered job kind's, FLARE's log streamer and the task
    clock every job carries."""
    return sorted({*site_classes(), JOB_LOG_STREAMER, TASK_CLOCK})


def server_allow_list() -> list[str]:
    """Exact classes a job may instantiate on the server: every registered job kind's, FLARE's log receiver, and the
    transfer meter and ciphertext filter every job carries."""
    return sorted({*server_classes(), JOB_LOG_RECEIVER, TRANSFER_METER, ADDRESSED_CIPHERTEXTS})
