"""A model's layers in PLayer-FL's sense, and the prefix/suffix partition of its state dict.

A layer is what a split may never cut, in parameter registration order:
- a residual block (`RESIDUAL_BLOCKS`: MONAI's ResNet blocks, PyTorch's transformer layers) is one layer, named by
  its module path (`layer2.0`), holding every parameter inside it: cutting one would federate half of a sum whose
  other half stays local (MONAI registers a block's downsample convolution after its second convolution);
- elsewhere each weight tensor of two or more dimensions (conv, linear, embedding) starts a layer named by its
  module (`features.3.weight` -> `features.3`), and one-dimensional non-bias parameters (norm scales) join the layer
  registered just before them, the conv/linear they normalise (a leading norm joins the first layer).
Biases are not weights (the paper scores weights only) but belong to their module's layer. Every floating-point
state-dict entry (biases, norm shifts, running statistics) belongs to the layer of its block or module, or else to
the layer of the entry before it. Integer buffers (BatchNorm's `num_batches_tracked`) belong to no layer and
never leave the site.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from monai.networks.nets.resnet import ResNetBlock, ResNetBottleneck
from torch import nn

V = TypeVar("V")

RESIDUAL_BLOCKS: tuple[type[nn.Module], ...] = (ResNetBlock, ResNetBottleneck, nn.TransformerEncoderLayer,
                                                 nn.TransformerDecoderLayer)
"""Modules whose output adds their input back: each is one layer, never split."""


@dataclass(frozen=True)
class Layer:
    """`weights`: the parameters whose importance defines the layer; `keys`: every state-dict entry it owns."""

    name: str
    weights: tuple[str, ...]
    keys: tuple[str, ...]


def _module_of(name: str) -> str:
    return name.rpartition(".")[0]


def _is_bias(name: str) -> bool:
    return "bias" in name.rpartition(".")[2]


def _block_of(name: str, blocks: Sequence[str]) -> str | None:
    return next((block for block in blocks if name.startswith(block + ".")), None)


def _outermost_blocks(model: nn.Module) -> list[str]:
    found = [name for name, module in model.named_modules() if name and isinstance(module, RESIDUAL_BLOCKS)]
    return [name for name in found if _block_of(name, found) is None]


def model_layers(model: nn.Module) -> list[Layer]:
    """The ordered layers of `model` (see module docstring); raises if the model has no weight tensor."""
    blocks = _outermost_blocks(model)
    groups: list[tuple[str, list[str]]] = []
    pending_scales: list[str] = []
    for name, param in model.named_parameters():
        if _is_bias(name):
            continue
        block = _block_of(name, blocks)
        if block is not None:
            if not groups or groups[-1][0] != block:
                groups.append((block, [*pending_scales]))
                pending_scales = []
            groups[-1][1].append(name)
        elif param.dim() >= 2:
            module = _module_of(name)
            taken = {g[0] for g in groups}
            groups.append((module if module and module not in taken else name, [name, *pending_scales]))
            pending_scales = []
        elif groups:
            groups[-1][1].append(name)
        else:
            pending_scales.append(name)
    if not groups:
        raise ValueError(f"{type(model).__name__} has no weight tensor of 2 or more dimensions: nothing to split")
    owner: dict[str, int] = {}
    for index, (group, weights) in enumerate(groups):
        owner.setdefault(group, index)
        for weight in weights:
            owner[weight] = index
            owner.setdefault(_module_of(weight), index)
    keys: list[list[str]] = [[] for _ in groups]
    current = 0
    for key, value in model.state_dict().items():
        block = _block_of(key, blocks)
        current = (
            owner[block] if block is not None and block in owner
            else owner.get(key, owner.get(_module_of(key), current))
        )
        if torch.is_floating_point(value):
            keys[current].append(key)
    return [Layer(name, tuple(weights), tuple(k)) for (name, weights), k in zip(groups, keys)]


def prefix_keys(layers: Sequence[Layer], num_layers: int) -> list[str]:
    """The state-dict keys of the first `num_layers` layers, in order."""
    if not 0 <= num_layers <= len(layers):
        raise ValueError(f"cannot take {num_layers} layers of a model with {len(layers)}")
    return [key for layer in layers[:num_layers] for key in layer.keys]


def split_state(state: Mapping[str, V], layers: Sequence[Layer], num_layers: int) -> tuple[dict[str, V], dict[str, V]]:
    """(prefix, suffix): the entries of the first `num_layers` layers, and every other floating-point entry."""
    shared = set(prefix_keys(layers, num_layers))
    missing = sorted(shared - set(state))
    if missing:
        raise KeyError(f"state has no entries {missing[:5]} of the first {num_layers} layers")
    everything = [key for layer in layers for key in layer.keys]
    prefix = {k: state[k] for k in everything if k in shared}
    suffix = {k: state[k] for k in everything if k not in shared and k in state}
    return prefix, suffix
