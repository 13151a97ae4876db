"""Model registry: jobs name a model and its arguments; sites and server build it from this one place."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import cast

import numpy as np
import torch
from torch import nn


def _linear_regression(in_features: int = 2) -> nn.Module:
    """The FedAvg reference model y = X w (no bias), starting at w = 0."""
    model = nn.Linear(in_features, 1, bias=False)
    nn.init.zeros_(model.weight)
    return model


_FACTORIES: dict[str, tuple[str, str]] = {
    "linear_regression": (__name__, "_linear_regression"),
    "cnn5": ("fl_contract.models.classifiers", "cnn5"),
    "cnn5_flat": ("fl_contract.models.classifiers", "cnn5_flat"),
    "resnet10": ("fl_contract.models.classifiers", "resnet10"),
    "segresnet": ("fl_contract.models.segmentation", "segresnet"),
}
"""Each model's factory as (module, function), imported when the model is first built: importing MONAI loads all of
its submodules (about 3 CPU-seconds), which a job process whose model is not MONAI's (fedavg-linear) need not pay."""


def model_names() -> list[str]:
    return sorted(_FACTORIES)


def build_model(name: str, **kwargs: object) -> nn.Module:
    if name not in _FACTORIES:
        raise ValueError(f"unknown model {name!r}; known models: {model_names()}")
    module, function = _FACTORIES[name]
    factory = cast(Callable[..., nn.Module], getattr(importlib.import_module(module), function))
    return factory(**kwargs)


def state_dict_to_numpy(model: nn.Module) -> dict[str, np.ndarray]:
    """The model's parameters as numpy arrays: the format that crosses the wire."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def load_numpy_params(model: nn.Module, params: Mapping[str, np.ndarray], strict: bool = True) -> None:
    """Load wire-format parameters; a mismatch names the offending keys."""
    state = {k: torch.as_tensor(np.asarray(v)) for k, v in params.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if strict and (missing or unexpected):
        raise ValueError(f"received parameters do not fit the model: missing {missing}, unexpected {unexpected}")
