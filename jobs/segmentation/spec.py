"""Federated 3D brain-tumour segmentation (BraTS / FeTS style): SegResNet trained at each site, FedAvg on the server.

Reference: NVIDIA FLARE's BraTS 2018 study (SegResNet, 4 sites: Dice 0.857 FedAvg vs 0.856 centralised). Defaults
are the BraTS configuration; tests and the CPU demo shrink the model and ROI (`CPU_DEMO`). Sites need their glioma
cases (docs/site-data.md) under the dataset key; `site-agent demo-data brats` writes synthetic ones. The best global
model (site-weighted validation Dice) is saved as best_global_model.pt and scored once on the sites' test cases.
"""

from __future__ import annotations

from typing import Any

from fl_contract.job_params.segmentation import SegmentationParams, SegResNetParams
from jobs import tracking
from jobs.spec import Extras, JobKind

CPU_DEMO: dict[str, Any] = {"roi_size": (32, 32, 32), "init_filters": 8, "blocks_down": (1, 1, 1), "blocks_up": (1, 1),
                            "dropout_prob": 0.0, "learning_rate": 1e-2, "val_fraction": 0.2, "test_fraction": 0.2}
"""A tiny SegResNet (~110k parameters) that learns the 32^3 synthetic cases in a few CPU rounds: demo and tests."""
CPU_DEMO_DATA: dict[str, Any] = {"n_cases": 5, "shape": (32, 32, 32), "layout": "nifti"}
"""`write_brats_site` arguments for a CPU_DEMO site: 3 training, 1 validation and 1 test case."""


def _extras(p: SegmentationParams) -> Extras:
    return tracking.extras(p.tracking)


KIND = JobKind(
    name="brats-segmentation",
    summary="3D brain-tumour segmentation (BraTS/FeTS style): MONAI SegResNet at each site, sample-weighted FedAvg "
            "(or median / trimmed mean), validation Dice TC/WT/ET per site and round, optional client-side DP",
    params=SegmentationParams,
    controller="server_app.fedavg.FedAvgController",
    site_task="site_agent.tasks.segmentation.SegmentationTask",
    extras=_extras,
    dataset_keys=("dataset",),
    site_classes=tracking.SITE_CLASSES,
    server_classes=tracking.SERVER_CLASSES,
    guide="docs/segmentation.md",
)

__all__ = ["CPU_DEMO", "CPU_DEMO_DATA", "KIND", "SegResNetParams", "SegmentationParams"]
