"""Prefix/suffix partition of a state dict: every float entry in exactly one layer, integer buffers in none."""

import pytest
import torch
from torch import nn

from fl_contract.models import build_model
from fl_contract.playerfl.layers import model_layers, prefix_keys, split_state


def test_biases_and_norm_entries_follow_their_layer():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 3))

    layers = model_layers(model)

    assert [layer.keys for layer in layers] == [
        ("0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var"),
        ("3.weight", "3.bias"),
    ]


def test_partition_covers_every_float_entry_once_and_keeps_integer_buffers_out():
    model = build_model("resnet10", width=4)
    layers = model_layers(model)
    state = model.state_dict()

    prefix, suffix = split_state(state, layers, 5)

    floats = {k for k, v in state.items() if torch.is_floating_point(v)}
    assert set(prefix) | set(suffix) == floats
    assert not set(prefix) & set(suffix)
    assert list(prefix) == prefix_keys(layers, 5)
    assert "conv1.weight" in prefix and "fc.weight" in suffix
    assert not any(k.endswith("num_batches_tracked") for k in prefix | suffix)


def test_cnn5_prefix_of_three_layers_is_the_first_three_convolutions():
    layers = model_layers(build_model("cnn5", in_size=32, channels=(2, 2, 2, 2, 2), hidden=4))

    keys = prefix_keys(layers, 3)

    assert keys == ["features.0.weight", "features.0.bias", "features.3.weight", "features.3.bias",
                    "features.6.weight", "features.6.bias"]


def test_prefix_longer_than_the_model_is_refused():
    layers = model_layers(nn.Linear(2, 2))

    with pytest.raises(ValueError, match="cannot take 2 layers of a model with 1"):
        prefix_keys(layers, 2)
