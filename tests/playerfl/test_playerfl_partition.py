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
    layers = model_layers(build_model("cnn5", channels=(2, 2, 2, 2, 2), hidden=4))

    keys = prefix_keys(layers, 3)

    assert [layer.name for layer in layers] == ["conv1", "conv2", "conv3", "conv4", "conv5", "fc1", "fc2"]
    assert keys == ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "conv3.weight", "conv3.bias"]


def test_a_residual_block_is_one_layer_with_its_norms_and_its_downsample():
    layers = model_layers(build_model("resnet10", width=4))

    block = next(layer for layer in layers if layer.name == "layer2.0")

    assert [layer.name for layer in layers] == ["conv1", "layer1.0", "layer2.0", "layer3.0", "layer4.0", "fc"]
    assert layers[0].weights == ("conv1.weight", "bn1.weight")
    assert block.weights == ("layer2.0.conv1.weight", "layer2.0.bn1.weight", "layer2.0.conv2.weight",
                             "layer2.0.bn2.weight", "layer2.0.downsample.0.weight", "layer2.0.downsample.1.weight")
    assert all(key.startswith("layer2.0.") for key in block.keys) and "layer2.0.downsample.1.running_var" in block.keys


def test_prefix_longer_than_the_model_is_refused():
    layers = model_layers(nn.Linear(2, 2))

    with pytest.raises(ValueError, match="cannot take 2 layers of a model with 1"):
        prefix_keys(layers, 2)
