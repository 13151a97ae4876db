"""Segmentation inference: the server sends a global model it holds locally; each site segments its own unlabelled
cases and writes a NIfTI label map (and, for DICOM cases, a DICOM SEG) per case into a local output folder.

The server needs the model's folder under the `model` key of its local/server_app.json (e.g. a finished run's
app_server/ folder); sites need the cases folder under `dataset` and an output folder under `output` in their
site_agent.json. Sites send back counts and timings only. See docs/segmentation.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from fl_contract.segmentation import MODEL
from jobs.segmentation.spec import SegResNetParams
from jobs.spec import Apps, JobKind, param
from server_app.results import BEST_MODEL_FILE


@dataclass(frozen=True)
class InferenceParams(SegResNetParams):
    model: str = param("brats", "key of the model's folder in the server's local/server_app.json (\"models\"), e.g. "
                                "a finished segmentation run's app_server/ folder")
    model_file: str = param(BEST_MODEL_FILE, "the state_dict file in that folder: best_global_model.pt (selected on "
                                             "validation) or global_model.pt (the last)")
    dataset: str = param("brats_inference", "dataset key sites map to the folder of cases to segment (one sub-folder "
                                            "per case, the four modalities; labels not needed)")
    output: str = param("brats_results", "dataset key sites map to the folder the label maps and DICOM SEGs go to (a "
                                         "sub-folder per job)")
    min_clients: int = param(1, "sites that must answer", low=1)
    seed: int = param(0, "seed of the site's task (inference itself draws nothing at random)")


def _apps(p: InferenceParams) -> Apps:
    return Apps(
        controller={"model_key": p.model, "model_file": p.model_file, "model": MODEL, "model_args": p.model_args(),
                    "min_clients": p.min_clients},
        site_task={"model_args": p.model_args(), "dataset": p.dataset, "output": p.output, "roi_size": list(p.roi_size),
                   "label_map": p.label_map, "model_description": f"{p.model}/{p.model_file}",
                   "resample_ras_1mm": p.resample_ras_1mm, "seed": p.seed},
    )


KIND = JobKind(
    name="brats-inference",
    summary="Segment unlabelled glioma MRI cases at each site with a global model the server holds: a NIfTI label map "
            "and, for DICOM cases, a DICOM SEG per case in a site-local folder; sites send only counts and timings",
    params=InferenceParams,
    controller="server_app.inference.InferenceController",
    site_task="site_agent.tasks.inference.InferenceTask",
    apps=_apps,
    dataset_keys=("dataset", "output"),
    server_model_keys=("model",),
    resumable=False,  # one task: resubmit it
    guide="docs/segmentation.md",
)
