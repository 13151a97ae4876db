"""Use the GPU when there is one and the site allows it, the CPU otherwise."""

from __future__ import annotations

import torch


def select_device(preference: str = "auto") -> torch.device:
    if preference == "cuda" and not torch.cuda.is_available():
        raise RuntimeError('the site configuration asks for "device": "cuda" but PyTorch sees no CUDA GPU; '
                           'install the CUDA build of torch or set "device": "auto"')
    if preference == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"cuda ({props.name}, {props.total_memory / 2**30:.0f} GiB)"
    return f"cpu ({torch.get_num_threads()} threads)"
