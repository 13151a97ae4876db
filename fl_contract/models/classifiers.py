"""Image classifiers for PLayer-FL: the paper's 5-conv CNN and a MONAI ResNet (a second, normalised architecture).

Both take (N, C, H, W) float images and return (N, num_classes) logits. Parameters are registered in forward
order, which is the layer order PLayer-FL's prefix/suffix split relies on (see `fl_contract.playerfl.layers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from monai.networks.nets import ResNet
from torch import Tensor, nn

CNN5_CHANNELS = (32, 64, 128, 256, 512)


class CNN5(nn.Module):
    """Five conv-ReLU-maxpool blocks then fc-ReLU-fc (reference: 32-64-128-256-512 channels, fc 512-256-classes).

    `in_size` is the square input side: after five 2x poolings the flattened size is channels[-1] * (in_size // 32)^2,
    so 200x200 inputs (the paper's ISIC setup) and 32x32 test images both fit.
    """

    def __init__(self, in_size: int = 200, in_channels: int = 3, num_classes: int = 4,
                 channels: Sequence[int] = CNN5_CHANNELS, hidden: int = 256):
        super().__init__()
        if len(channels) != 5:
            raise ValueError(f"CNN5 needs 5 conv widths, got {list(channels)}")
        side = in_size // 2 ** len(channels)
        if side < 1:
            raise ValueError(f"CNN5 input size {in_size} is too small: five 2x poolings need at least 32 pixels")
        layers: list[nn.Module] = []
        previous = in_channels
        for width in channels:
            layers += [nn.Conv2d(previous, width, kernel_size=3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            previous = width
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(previous * side * side, hidden), nn.ReLU(inplace=True),
                                        nn.Linear(hidden, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return cast(Tensor, self.classifier(self.features(x)))  # nn.Module calls are typed Any


def cnn5(in_size: int = 200, in_channels: int = 3, num_classes: int = 4, channels: Sequence[int] = CNN5_CHANNELS,
         hidden: int = 256) -> nn.Module:
    return CNN5(in_size, in_channels, num_classes, tuple(channels), hidden)


def resnet10(in_channels: int = 3, num_classes: int = 4, width: int = 64) -> nn.Module:
    """MONAI's 2-D ResNet-10 (basic blocks, batch norm); `width` scales the four stages (width, 2w, 4w, 8w)."""
    return ResNet(block="basic", layers=[1, 1, 1, 1], block_inplanes=[width, 2 * width, 4 * width, 8 * width],
                  spatial_dims=2, n_input_channels=in_channels, num_classes=num_classes)
