"""Image classifiers: PLayer-FL's ISIC CNN, the flattening CNN the FedKT-CSD classifier uses, and a MONAI ResNet.

All take (N, C, H, W) float images and return (N, num_classes) logits. Parameters are registered in forward
order, which is the layer order PLayer-FL's prefix/suffix split relies on (see `fl_contract.playerfl.layers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from monai.networks.nets import ResNet
from torch import Tensor, nn

CNN5_CHANNELS = (32, 64, 128, 256, 512)
POOLED_FROM = 2
"""0-based index of the first convolution followed by 2x max pooling and dropout in PLayer-FL's CNN (the third)."""


class CNN5(nn.Module):
    """PLayer-FL's ISIC CNN (Elhussein & Gürsoy, published code): five 3x3 conv-ReLU layers (32-64-128-256-512), 2x
    max pooling and dropout 0.2 after the third to fifth, global average pooling, fc 512 -> 256 -> ReLU -> classes.

    About 1.70M parameters at any input size (global pooling), 4 classes. Weights are Kaiming-normal and biases zero,
    as in the reference. Layers are attributes `conv1`..`conv5`, `fc1`, `fc2`: PLayer-FL's layer names.
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 4, channels: Sequence[int] = CNN5_CHANNELS,
                 hidden: int = 256, dropout: float = 0.2):
        super().__init__()
        if len(channels) != 5:
            raise ValueError(f"CNN5 needs 5 conv widths, got {list(channels)}")
        widths = [in_channels, *channels]
        self.conv1, self.conv2, self.conv3, self.conv4, self.conv5 = (
            nn.Conv2d(widths[i], widths[i + 1], kernel_size=3, padding=1) for i in range(5))
        self.fc1 = nn.Linear(widths[-1], hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(dropout)
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)) and module.bias is not None:
                nn.init.kaiming_normal_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: Tensor) -> Tensor:
        for index, conv in enumerate((self.conv1, self.conv2, self.conv3, self.conv4, self.conv5)):
            x = nn.functional.relu(conv(x))
            if index >= POOLED_FROM:
                x = self.dropout(self.pool(x))
        x = x.mean(dim=(2, 3))
        return cast(Tensor, self.fc2(nn.functional.relu(self.fc1(x))))  # nn.Module calls are typed Any


class FlatCNN5(nn.Module):
    """Five conv-ReLU-maxpool blocks, flattened into fc-ReLU-fc: the FedKT-CSD evaluation classifier.

    `in_size` is the square input side: after five 2x poolings the flattened size is channels[-1] * (in_size // 32)^2.
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


def cnn5(in_channels: int = 3, num_classes: int = 4, channels: Sequence[int] = CNN5_CHANNELS, hidden: int = 256,
         dropout: float = 0.2) -> nn.Module:
    return CNN5(in_channels, num_classes, tuple(channels), hidden, dropout)


def cnn5_flat(in_size: int = 200, in_channels: int = 3, num_classes: int = 4, channels: Sequence[int] = CNN5_CHANNELS,
              hidden: int = 256) -> nn.Module:
    return FlatCNN5(in_size, in_channels, num_classes, tuple(channels), hidden)


def resnet10(in_channels: int = 3, num_classes: int = 4, width: int = 64) -> nn.Module:
    """MONAI's 2-D ResNet-10 (basic blocks, batch norm); `width` scales the four stages (width, 2w, 4w, 8w)."""
    return ResNet(block="basic", layers=[1, 1, 1, 1], block_inplanes=[width, 2 * width, 4 * width, 8 * width],
                  spatial_dims=2, n_input_channels=in_channels, num_classes=num_classes)
