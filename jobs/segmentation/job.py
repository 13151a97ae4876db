"""Federated 3D brain-tumour segmentation (BraTS / FeTS style): SegResNet trained at each site, FedAvg on the server.

Reference: NVIDIA FLARE's BraTS 2018 study (SegResNet, 4 sites: Dice 0.857 FedAvg vs 0.856 centralised).

Parameters (defaults are the BraTS configuration; tests and the CPU demo shrink the model and ROI):
    num_rounds           FedAvg rounds; one extra `validate` task scores the final model
    local_epochs         passes over the site's training cases per round
    roi_size             training crop and sliding-window size, 3 ints (default 224 224 144); multiples of
                         2^(len(blocks_down)-1)
    init_filters         SegResNet width (16; must be a multiple of 8), blocks_down (1,2,2,4), blocks_up (1,1,1),
    dropout_prob         dropout (0.2)
    label_map            brats2021 (enhancing = 4; BraTS 2018-2021, FeTS) or brats2023 (enhancing = 3)
    learning_rate        Adam step size (1e-4), weight_decay 1e-5, batch_size 1
    val_fraction         share of each site's cases held out for validation (seeded split, at least 1 case)
    cache_rate           share of decoded, normalised cases kept in memory (1.0; lower it for large sites)
    aggregation          weighted_mean (FedAvg, weights = training cases), median or trimmed_mean (+ trim_fraction)
    dp_clip_norm         client-side DP: L2 clip of the weight difference (0 = off), dp_noise_multiplier: noise std
                         = multiplier x clip, reported by every site as dp_noise_std
    tracking             per-site metrics to TensorBoard through FLARE's experiment tracking (server tb_events/)
    min_clients          sites that must answer each round; dataset: the site config's key for the cases ("brats")
    seed                 initial weights, case split, augmentation, batch order

Sites need their glioma cases (docs/site-data.md) under the dataset key; `site-agent demo-data brats` writes
synthetic ones. The best global model (site-weighted validation Dice) is saved as best_global_model.pt.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from nvflare.apis.analytix import ANALYTIC_EVENT_TYPE
from nvflare.app_common.widgets.convert_to_fed_event import ConvertToFedEvent
from nvflare.app_opt.tracking.tb.tb_receiver import TBAnalyticsReceiver
from nvflare.app_opt.tracking.tb.tb_writer import TBWriter
from nvflare.job_config.api import FedJob

from jobs.common import new_job
from server_app.aggregation import RULES
from server_app.fedavg import FedAvgController
from fl_contract.labels import LABEL_MAPS
from fl_contract.models.segmentation import min_roi_divisor
from site_agent.segmentation.training import DICE_KEYS
from site_agent.tasks.segmentation import BRATS_ROI, MODEL, VAL_CASES, SegmentationTask

NAME = "brats-segmentation"
TB_WRITER_ID = "tb_writer"
SELECTION_METRIC = DICE_KEYS[-1]  # val_dice_mean
CPU_DEMO = {"roi_size": (32, 32, 32), "init_filters": 8, "blocks_down": (1, 1, 1), "blocks_up": (1, 1), "dropout_prob": 0.0,
            "learning_rate": 1e-2, "val_fraction": 0.25}
"""A tiny SegResNet (~110k parameters) that learns the 32^3 synthetic cases in a few CPU rounds: demo and tests."""
CPU_DEMO_DATA = {"n_cases": 4, "shape": (32, 32, 32), "layout": "nifti"}
"""`write_brats_site` arguments for a CPU_DEMO site: 3 training and 1 validation case."""


def build_job(
    num_rounds: int = 20,
    local_epochs: int = 1,
    roi_size: Sequence[int] = BRATS_ROI,
    init_filters: int = 16,
    blocks_down: Sequence[int] = (1, 2, 2, 4),
    blocks_up: Sequence[int] = (1, 1, 1),
    dropout_prob: float = 0.2,
    label_map: str = "brats2021",
    learning_rate: float = 1e-4,
    weight_decay: float = 1e-5,
    batch_size: int = 1,
    val_fraction: float = 0.2,
    cache_rate: float = 1.0,
    aggregation: str = "weighted_mean",
    trim_fraction: float = 0.1,
    dp_clip_norm: float = 0.0,
    dp_noise_multiplier: float = 0.0,
    tracking: bool = True,
    min_clients: int = 2,
    dataset: str = "brats",
    seed: int = 0,
) -> FedJob:
    divisor = min_roi_divisor(blocks_down)
    if len(roi_size) != 3 or any(s % divisor for s in roi_size):
        raise ValueError(f"roi_size {list(roi_size)}: give 3 sizes, each a multiple of {divisor} for {len(blocks_down)} SegResNet levels")
    if label_map not in LABEL_MAPS:
        raise ValueError(f"label_map {label_map!r}: use one of {sorted(LABEL_MAPS)}")
    model_args = {"init_filters": init_filters, "blocks_down": list(blocks_down), "blocks_up": list(blocks_up),
                  "dropout_prob": dropout_prob}
    job = new_job(NAME, min_clients)
    job.to_server(FedAvgController(num_rounds=num_rounds, model=MODEL, model_args=model_args, aggregation=aggregation,
                                   trim_fraction=trim_fraction, min_clients=min_clients, selection_metric=SELECTION_METRIC,
                                   selection_weight=VAL_CASES, seed=seed))
    job.to_clients(SegmentationTask(model_args=model_args, dataset=dataset, roi_size=roi_size, label_map=label_map,
                                    local_epochs=local_epochs, batch_size=batch_size, learning_rate=learning_rate,
                                    weight_decay=weight_decay, val_fraction=val_fraction, cache_rate=cache_rate,
                                    dp_clip_norm=dp_clip_norm, dp_noise_multiplier=dp_noise_multiplier,
                                    analytic_sender_id=TB_WRITER_ID if tracking else "", seed=seed))
    if tracking:
        job.to_server(TBAnalyticsReceiver(tb_folder="tb_events"), id="tb_receiver")
        job.to_clients(TBWriter(), id=TB_WRITER_ID)
        job.to_clients(ConvertToFedEvent(events_to_convert=[ANALYTIC_EVENT_TYPE]), id="event_to_fed")
    return job


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-rounds", type=int, default=20)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--roi-size", type=int, nargs=3, default=list(BRATS_ROI), metavar=("X", "Y", "Z"))
    parser.add_argument("--init-filters", type=int, default=16)
    parser.add_argument("--blocks-down", type=int, nargs="+", default=[1, 2, 2, 4])
    parser.add_argument("--blocks-up", type=int, nargs="+", default=[1, 1, 1])
    parser.add_argument("--dropout-prob", type=float, default=0.2)
    parser.add_argument("--label-map", default="brats2021", choices=sorted(LABEL_MAPS))
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--weight-decay", type=float, default=1e-5)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--val-fraction", type=float, default=0.2)
    parser.add_argument("--cache-rate", type=float, default=1.0)
    parser.add_argument("--aggregation", default="weighted_mean", choices=sorted(RULES))
    parser.add_argument("--trim-fraction", type=float, default=0.1)
    parser.add_argument("--dp-clip-norm", type=float, default=0.0, help="0 = no client-side DP")
    parser.add_argument("--dp-noise-multiplier", type=float, default=0.0)
    parser.add_argument("--no-tracking", dest="tracking", action="store_false", help="no TensorBoard events")
    parser.add_argument("--min-clients", type=int, default=2)
    parser.add_argument("--dataset", default="brats")
    parser.add_argument("--seed", type=int, default=0)
