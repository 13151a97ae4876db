"""Layer sensitivity: equals a hand computation, skips biases, pools norm scales with their layer, is cumulative,
any architecture, and is measured after the first local epoch."""

import pytest
import torch
from torch import nn

from fl_contract.models import build_model
from fl_contract.playerfl.layers import model_layers
from site_agent.playerfl.sensitivity import federation_sensitivity


def _tiny_mlp() -> nn.Module:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 2.0], [0.0, -1.0]]))
        model[0].bias.copy_(torch.tensor([5.0, 5.0]))
        model[1].weight.copy_(torch.tensor([[3.0, -2.0]]))
        model[1].bias.copy_(torch.tensor([0.0]))
    return model


def test_sensitivity_equals_hand_computation_without_biases():
    model = _tiny_mlp()
    x, y = torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0]])

    curve = federation_sensitivity(model, nn.functional.mse_loss, x, y)

    # h = W1 x + b1 = (8, 4); out = W2 h + b2 = 16; loss = out^2, dL/dout = 32.
    # dL/dW2 = 32 * h = (256, 128); theta*grad = (768, -256)     -> I_2 = (768^2 + 256^2) / 2
    # dL/dh = 32 * W2 = (96, -64); dL/dW1 = outer((96, -64), x)   -> theta*grad = (96, 192, 0, 64)
    i1 = (96.0**2 + 192.0**2 + 0.0 + 64.0**2) / 4
    i2 = (768.0**2 + 256.0**2) / 2
    assert curve.layers == ["0", "1"]
    assert curve.importance == pytest.approx([i1, i2])
    assert curve.cumulative == pytest.approx([i1, i1 + i2])


def test_norm_scale_is_pooled_with_its_layer_weight_by_weight():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    x, y = torch.randn(4, 1, 6, 6), torch.tensor([0, 1, 2, 0])

    curve = federation_sensitivity(model, nn.functional.cross_entropy, x, y)

    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    weights = (model[0].weight, model[1].weight)
    pooled = sum(float(((p.detach() * p.grad) ** 2).sum()) for p in weights) / sum(p.numel() for p in weights)
    assert curve.layers == ["0", "3"]
    assert curve.importance[0] == pytest.approx(pooled, rel=1e-5)


def test_running_statistics_and_gradients_are_left_untouched():
    torch.manual_seed(0)
    model = build_model("resnet10", width=4)
    before = {k: v.clone() for k, v in model.state_dict().items()}

    federation_sensitivity(model, nn.functional.cross_entropy, torch.randn(3, 3, 32, 32), torch.tensor([0, 1, 2]))

    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(
    ("model", "inputs", "expected_layers"),
    [
        (lambda: build_model("cnn5", channels=(4, 4, 4, 4, 4), hidden=8), torch.randn(2, 3, 32, 32), 7),
        (lambda: build_model("resnet10", width=4), torch.randn(2, 3, 32, 32), 6),
        (lambda: nn.Sequential(nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2),
                               nn.Flatten(), nn.Linear(8 * 5, 3)), torch.randn(2, 5, 8), 3),
    ],
    ids=["cnn5", "monai-resnet10", "transformer"],
)
def test_any_architecture_gives_a_finite_non_decreasing_curve_over_weight_tensors(model, inputs, expected_layers):
    torch.manual_seed(0)
    net = model()

    curve = federation_sensitivity(net, nn.functional.cross_entropy, inputs, torch.tensor([0, 2]))

    assert len(curve.layers) == expected_layers
    assert all(i >= 0 for i in curve.importance)
    assert all(b >= a for a, b in zip(curve.cumulative, curve.cumulative[1:]))
    assert not any(w.endswith("bias") for layer in model_layers(net) for w in layer.weights)
