"""Layer importance and cumulative federation sensitivity (PLayer-FL).

I_k = (1/n_k) * sum_p (theta_p * grad_p)^2 over the n_k weights of layer k, F_l = sum_{k<=l} I_k
(docs/algorithms.md#layers-importance-and-federation-sensitivity). A layer's weights are every weight tensor it
groups (a conv and its norm scale, a residual block's convolutions), pooled: each weight counts once, so a norm
scale of 64 values does not weigh as much as a convolution of 36,864. Computed on one training batch in train mode,
with the gradient of the mean training loss; the model's weights, gradients and running statistics are left
untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fl_contract.playerfl.layers import Layer, model_layers


@dataclass(frozen=True)
class SensitivityCurve:
    """Per-layer importance and its running sum, in layer order: what a site sends the server once."""

    layers: list[str]
    importance: list[float]
    cumulative: list[float]

    def to_meta(self) -> dict[str, list[Any]]:
        return {"layers": list(self.layers), "importance": list(self.importance), "cumulative": list(self.cumulative)}


def layer_importance(layers: list[Layer], params: Mapping[str, Tensor], grads: Mapping[str, Tensor]) -> list[float]:
    """I_k per layer from parameter values and gradients keyed by parameter name (pooled over the layer's weights)."""
    values = []
    for layer in layers:
        total = sum(float(((params[w].detach() * grads[w]) ** 2).sum()) for w in layer.weights)
        values.append(total / sum(params[w].numel() for w in layer.weights))
    return values


def federation_sensitivity(model: nn.Module, loss_fn: Callable[[Tensor, Tensor], Tensor], inputs: Tensor,
                           targets: Tensor) -> SensitivityCurve:
    """The layer curve of `model` on one batch (train mode, mean loss); leaves the model as it found it."""
    layers = model_layers(model)
    named = dict(model.named_parameters())
    weight_names = [w for layer in layers for w in layer.weights]
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    was_training = model.training
    model.train()
    try:
        loss = loss_fn(model(inputs), targets)
        grads = torch.autograd.grad(loss, [named[w] for w in weight_names], allow_unused=True)
    finally:
        model.train(was_training)
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(buffers[name])  # a train-mode forward updates BatchNorm statistics
    grad_by_name = {w: (g if g is not None else torch.zeros_like(named[w])) for w, g in zip(weight_names, grads)}
    importance = layer_importance(layers, named, grad_by_name)
    if not all(np.isfinite(importance)):
        raise FloatingPointError(f"layer sensitivity is not finite ({importance}); check the loss and the batch")
    return SensitivityCurve([layer.name for layer in layers], importance, np.cumsum(importance).tolist())
