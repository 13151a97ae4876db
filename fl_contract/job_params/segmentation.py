"""brats-segmentation's parameters (and the SegResNet ones brats-inference shares): BraTS / FeTS-style 3D
brain-tumour segmentation, SegResNet trained at each site, FedAvg on the server.

Defaults are the BraTS configuration (NVIDIA FLARE's BraTS 2018 study: SegResNet, 4 sites); tests and the CPU demo
shrink the model and ROI (`jobs.segmentation.spec.CPU_DEMO`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fl_contract.aggregation_rules import AGGREGATION_RULES
from fl_contract.labels import LABEL_MAPS
from fl_contract.masked_weights import SecureWeightsParams
from fl_contract.params import FederationParams, ParameterError, RoundParams, param
from fl_contract.segmentation import (
    MODEL,
    SELECTION_METRIC,
    TEST,
    TEST_CASES,
    TEST_METRIC,
    VAL,
    VAL_CASES,
    min_roi_divisor,
)
from fl_contract.weights_encoding import WeightsEncodingParams


@dataclass(frozen=True)
class SlidingWindow:
    """How a whole volume is segmented (MONAI's sliding-window inference): the window, which is the training crop,
    the windows per forward pass and their overlap. One value from the job's parameters, passed down whole, so no
    function below the task gives them defaults of its own."""

    roi_size: tuple[int, ...]
    batch_size: int
    overlap: float


@dataclass(frozen=True)
class CaseRecipe:
    """How a site makes its cases into datasets for a training job: the split, the decoding and the training crop.
    One value from the job's parameters, passed down whole (`SegmentationParams.case_recipe`), so the data layer
    gives none of them a default of its own and a new data parameter is its field here and its one use."""

    roi_size: tuple[int, ...]
    label_map: str
    grid: str
    val_fraction: float
    test_fraction: float
    cache_rate: float
    seed: int
    resample_ras_1mm: bool


@dataclass(frozen=True)
class CaseReadingParams(FederationParams):
    """How a job reads a site's glioma cases, shared by every kind that reads them (training, inference, the data
    summary): the label convention, the grid policy, the resampling and the network's crop."""

    roi_size: tuple[int, ...] = param((224, 224, 144), "training crop and sliding-window size, 3 ints, multiples of "
                                                       "2^(len(blocks_down)-1) (NVIDIA FLARE's BraTS 2018 crop)", low=8)
    label_map: str = param("brats2021", "brats2021 (enhancing = 4; BraTS 2018-2021, FeTS) or brats2023 (enhancing = 3)",
                           choices=sorted(LABEL_MAPS))
    grid: str = param("refuse", "a case whose four series lie on different voxel grids: refuse it (naming the case) "
                                "or resample the others onto the first series' grid", choices=("refuse", "resample"))
    resample_ras_1mm: bool = param(False, "reorient every case to RAS and resample it to 1 mm voxels before the "
                                          "network (MONAI Orientationd/Spacingd), for sites whose cases are not "
                                          "BraTS-preprocessed; inference writes its label maps back on the case's grid")


@dataclass(frozen=True)
class SegResNetParams(CaseReadingParams):
    """The network and label map, shared by every job kind that runs the segmentation model (training, inference)."""

    init_filters: int = param(16, "SegResNet width (a multiple of 8)", low=8)
    blocks_down: tuple[int, ...] = param((1, 2, 2, 4), "SegResNet residual blocks per encoder level", low=1)
    blocks_up: tuple[int, ...] = param((1, 1, 1), "SegResNet blocks per decoder level (one fewer than blocks_down)",
                                       low=1)
    dropout_prob: float = param(0.2, "dropout", low=0.0, high=0.9)
    sw_batch_size: int = param(1, "sliding-window inference: windows per forward pass", low=1)
    sw_overlap: float = param(0.5, "sliding-window inference: overlap of neighbouring windows", low=0.0, high=0.95)

    def check(self) -> None:
        divisor = min_roi_divisor(self.blocks_down)
        if len(self.roi_size) != 3 or any(s % divisor for s in self.roi_size):
            raise ParameterError(f"roi_size {list(self.roi_size)}: give 3 sizes, each a multiple of {divisor} for "
                                 f"{len(self.blocks_down)} SegResNet levels")
        if len(self.blocks_up) != len(self.blocks_down) - 1:
            raise ParameterError(f"blocks_up {list(self.blocks_up)}: give one entry fewer than blocks_down "
                                 f"{list(self.blocks_down)}")
        if self.init_filters % 8:
            raise ParameterError(f"init_filters={self.init_filters}: SegResNet's GroupNorm needs a multiple of 8")

    def sliding_window(self) -> SlidingWindow:
        return SlidingWindow(tuple(self.roi_size), self.sw_batch_size, self.sw_overlap)

    def model_args(self) -> dict[str, Any]:
        """The arguments of fl_contract.models' `segresnet`, as the job's JSON carries them."""
        return {"init_filters": self.init_filters, "blocks_down": list(self.blocks_down),
                "blocks_up": list(self.blocks_up), "dropout_prob": self.dropout_prob}


@dataclass(frozen=True)
class SegmentationParams(WeightsEncodingParams, SecureWeightsParams, SegResNetParams, RoundParams):
    num_rounds: int = param(20, "FedAvg rounds; then a validate task scores the final model and a test task "
                                 "the selected one", low=1)
    local_epochs: int = param(1, "passes over the site's training cases per round", low=1)
    learning_rate: float = param(1e-4, "Adam step size", low=0.0)
    weight_decay: float = param(1e-5, "Adam weight decay", low=0.0)
    batch_size: int = param(1, "cases per training batch", low=1)
    val_fraction: float = param(0.2, "share of each site's cases held out for validation: every model is scored "
                                     "on them and the best is selected (seeded, at least 1 case)", low=0.01, high=0.9)
    test_fraction: float = param(0.2, "share of each site's cases held out for testing: only the selected model is "
                                      "scored on them, once, for the final report (seeded, at least 1 case; 0 = no "
                                      "test split)", low=0.0, high=0.9)
    cache_rate: float = param(1.0, "share of decoded, normalised cases kept in memory (lower it for large sites)",
                              low=0.0, high=1.0)
    aggregation: str = param("weighted_mean", "weighted_mean (FedAvg, weights = training cases), median or "
                                              "trimmed_mean", choices=AGGREGATION_RULES)
    trim_fraction: float = param(0.1, "share dropped at each end by trimmed_mean", low=0.0, high=0.49)
    dp_clip_norm: float = param(0.0, "client-side DP: L2 clip of the weight difference (0 = no client-side DP)",
                                low=0.0)
    dp_noise_multiplier: float = param(0.0, "client-side DP: noise std = multiplier x clip, reported by every site as "
                                            "dp_noise_std", low=0.0)
    tracking: bool = param(True, "per-site metrics to TensorBoard through FLARE's experiment tracking")
    min_clients: int = param(2, "sites that must answer each round", low=1)
    dataset: str = param("brats", "dataset key sites map to their glioma cases in site_agent.json")
    seed: int = param(0, "initial weights, case split, augmentation, batch order")
    cross_site_evaluation: bool = param(False, "after the last round, score the selected global model and each "
                                               "site's final local model at every site, on its test cases (its "
                                               "validation cases without a test split): a sites x models matrix in "
                                               "results.json; a local model leaves its site only where the site's "
                                               "policy allows it (share_local_model), never with secure_aggregation "
                                               "or client-side DP")

    def case_recipe(self) -> CaseRecipe:
        """What the site's data layer (site_agent.segmentation.data) needs of these parameters."""
        return CaseRecipe(tuple(self.roi_size), self.label_map, self.grid, self.val_fraction, self.test_fraction,
                          self.cache_rate, self.seed, self.resample_ras_1mm)

    def model_spec(self) -> tuple[str, dict[str, Any]]:
        """The network (fl_contract.models name and arguments) the FedAvg workflow averages."""
        return MODEL, self.model_args()

    def selection(self) -> tuple[str | None, str | None, str | None, str | None]:
        """(selection metric, its weight, test metric, its weight): the best model by site-weighted validation Dice,
        scored once on the test cases when there are any."""
        return SELECTION_METRIC, VAL_CASES, TEST_METRIC if self.test_fraction > 0 else None, TEST_CASES

    def cross_site_split(self) -> str | None:
        """The cases cross-site evaluation scores every model on (never the training cases), or None without it."""
        if not self.cross_site_evaluation:
            return None
        return TEST if self.test_fraction > 0 else VAL

    def local_models_refusal(self) -> str:
        """Why no site's local model may leave for cross-site evaluation, whatever its policy, or "": with
        secure aggregation the server must never hold one site's model; with client-side DP the local model is
        the raw one, outside the guarantee its noised updates have."""
        if self.secure_aggregation:
            return ("the job masks the sites' updates (secure_aggregation): no site's own model ever reaches the "
                    "server, so only the global model is scored")
        if self.dp_clip_norm > 0:
            return ("the job's client-side DP covers only the noised updates: a site's raw local model would leave "
                    "outside that guarantee, so only the global model is scored")
        return ""

    def check(self) -> None:
        super().check()
        if self.secure_aggregation and self.dp_clip_norm > self.update_l2_bound:
            raise ParameterError(f"update_l2_bound={self.update_l2_bound} is below dp_clip_norm={self.dp_clip_norm}: "
                                 "the clipped (and noised) difference is what the sites mask; raise the bound")
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ParameterError(f"val_fraction={self.val_fraction} and test_fraction={self.test_fraction} leave no "
                                 "training cases: keep their sum below 1")
