"""From a network to a BraTS label map: sliding-window logits, sigmoid regions, one label per voxel.

The network has one sigmoid output per region (TC, WT, ET) and thresholds them independently, so on its own a
predicted ET can lie outside the predicted TC. `label_map_from_regions` keeps each region only inside the next
larger one: edema where WT, necrotic core where TC and WT, enhancing tumour where ET, TC and WT all agree. Read back
as regions (TC = core | enhancing, WT = all three: MONAI's `ConvertToMultiChannelBasedOnBratsClasses`), ET lies
inside TC inside WT. nnU-Net's BraTS ordering (each channel overwrites the last, ET last) would let an ET channel
that fires everywhere, as an untrained network's does, flood all three regions; the nesting here cannot grow a
region beyond the larger one. This label map is what sites score and what the inference job writes.
"""

from __future__ import annotations

import torch
from monai.inferers import sliding_window_inference
from monai.transforms import Activations, AsDiscrete, Compose
from monai.transforms.utility.array import ConvertToMultiChannelBasedOnBratsClasses
from torch import nn

from fl_contract.job_params.segmentation import SlidingWindow
from fl_contract.labels import REGIONS, LabelMap
from fl_contract.precision import select_precision

_TC, _WT, _ET = (REGIONS.index(r) for r in ("TC", "WT", "ET"))


def region_logits(net: nn.Module, image: torch.Tensor, window: SlidingWindow, device: torch.device) -> torch.Tensor:
    """(N, 3, X, Y, Z) float32 logits of whole volumes, tiled by the job's windows (MONAI's sliding window)."""
    with torch.no_grad(), select_precision(device).autocast():
        logits = sliding_window_inference(image.to(device), list(window.roi_size), window.batch_size, net,
                                          overlap=window.overlap)
    if not isinstance(logits, torch.Tensor):  # MONAI passes through a network's tuple or dict output
        raise TypeError(f"the segmentation network returned {type(logits).__name__}, not a tensor of logits")
    return logits.float()


def regions_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """One case's (3, X, Y, Z) logits -> boolean TC/WT/ET masks (sigmoid > 0.5, MONAI's BraTS post-transform)."""
    post = Compose([Activations(sigmoid=True), AsDiscrete(threshold=0.5)])
    return torch.as_tensor(post(logits)).bool()


def label_map_from_regions(regions: torch.Tensor, label_map: LabelMap) -> torch.Tensor:
    """(3, X, Y, Z) TC/WT/ET masks -> (X, Y, Z) uint8 labels of `label_map` (0, necrosis, edema, enhancing)."""
    masks = regions.bool()
    whole = masks[_WT]
    core = whole & masks[_TC]
    labels = torch.zeros(masks.shape[1:], dtype=torch.uint8, device=masks.device)
    labels[whole] = LabelMap.EDEMA
    labels[core] = LabelMap.NECROSIS
    labels[core & masks[_ET]] = label_map.enhancing
    return labels


def regions_from_label_map(labels: torch.Tensor, label_map: LabelMap) -> torch.Tensor:
    """(X, Y, Z) or (1, X, Y, Z) labels -> (3, X, Y, Z) boolean TC/WT/ET masks (MONAI's BraTS conversion)."""
    return torch.as_tensor(ConvertToMultiChannelBasedOnBratsClasses(et_label=label_map.enhancing)(labels)).bool()
