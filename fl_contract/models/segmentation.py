"""MONAI SegResNet (Myronenko 2018) for multi-modal brain-tumour segmentation: 4 MRI channels in, TC/WT/ET out.

The defaults are the BraTS configuration of NVIDIA FLARE's BraTS study and MONAI's tutorials; jobs shrink
`init_filters` and the block counts for tests and CPU demos. Arguments arrive from job JSON, so sequences may
be lists.
"""

from __future__ import annotations

from collections.abc import Sequence

from monai.networks.nets import SegResNet
from torch import nn

from fl_contract.labels import REGIONS

# T1, T1ce, T2, FLAIR: site_agent.data.brats_case.MODALITIES, not imported so the server reads no data code
IN_CHANNELS = 4
GROUP_NORM_GROUPS = 8  # SegResNet's default normalisation: GroupNorm with 8 groups


def segresnet(
    init_filters: int = 16,
    blocks_down: Sequence[int] = (1, 2, 2, 4),
    blocks_up: Sequence[int] = (1, 1, 1),
    dropout_prob: float = 0.2,
    in_channels: int = IN_CHANNELS,
    out_channels: int = len(REGIONS),
) -> nn.Module:
    """SegResNet with sigmoid-ready logits, one output channel per region (TC, WT, ET)."""
    if init_filters < GROUP_NORM_GROUPS or init_filters % GROUP_NORM_GROUPS:
        raise ValueError(f"init_filters={init_filters}: SegResNet's GroupNorm needs a multiple of {GROUP_NORM_GROUPS}")
    if len(blocks_up) != len(blocks_down) - 1:
        raise ValueError(f"blocks_up {list(blocks_up)} must have one entry fewer than blocks_down {list(blocks_down)}")
    return SegResNet(
        spatial_dims=3,
        init_filters=init_filters,
        in_channels=in_channels,
        out_channels=out_channels,
        dropout_prob=dropout_prob,
        blocks_down=tuple(blocks_down),
        blocks_up=tuple(blocks_up),
    )
