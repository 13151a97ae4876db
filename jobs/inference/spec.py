"""Segmentation inference: the server sends a global model it holds locally; each site segments its own unlabelled
cases and writes a NIfTI label map (and, for DICOM cases, a DICOM SEG) per case into a local output folder.

The server needs the model's folder under the `model` key of its local/server_app.json (e.g. a finished run's
app_server/ folder); sites need the cases folder under `dataset` and an output folder under `output` in their
site_agent.json. Sites send back counts and timings only. See docs/segmentation.md.
"""

from __future__ import annotations

from fl_contract.job_params.inference import InferenceParams
from jobs.spec import JobKind

KIND = JobKind(
    name="brats-inference",
    summary="Segment unlabelled glioma MRI cases at each site with a global model the server holds: a NIfTI label map "
            "and, for DICOM cases, a DICOM SEG per case in a site-local folder; sites send only counts and timings",
    params=InferenceParams,
    controller="server_app.inference.InferenceController",
    site_task="site_agent.tasks.inference.InferenceTask",
    dataset_keys=("dataset", "output"),
    resumable=False,  # one task: resubmit it
    guide="docs/segmentation.md",
)

__all__ = ["KIND", "InferenceParams"]
