"""Use the GPU when there is one and the site allows it, the CPU otherwise."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

PROBE_MATMUL_SIZE = 4096


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


@dataclass(frozen=True)
class GpuFacts:
    """What site IT needs to know about the GPU the agent will use, and proof that it computes."""

    name: str
    total_bytes: int
    free_bytes: int
    cuda_version: str
    capability: tuple[int, int]
    matmul_tflops: float
    """Measured: a PROBE_MATMUL_SIZE-square matrix product in the precision the site will train in."""


def probe_gpu(device: torch.device, dtype: torch.dtype) -> GpuFacts:
    """Name, memory, CUDA version and compute capability of `device`, and a short timed `dtype` matmul on it."""
    props = torch.cuda.get_device_properties(device)
    free, total = torch.cuda.mem_get_info(device)
    a = torch.randn(PROBE_MATMUL_SIZE, PROBE_MATMUL_SIZE, device=device, dtype=dtype)
    b = torch.randn(PROBE_MATMUL_SIZE, PROBE_MATMUL_SIZE, device=device, dtype=dtype)
    torch.matmul(a, b)  # warm-up: cuBLAS initialisation
    torch.cuda.synchronize(device)
    repeats = 10
    start = time.perf_counter()
    for _ in range(repeats):
        product = torch.matmul(a, b)
    torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - start) / repeats
    if not bool(torch.isfinite(product).all()):
        raise RuntimeError(f"a {dtype} matrix product on {props.name} gave non-finite values")
    return GpuFacts(props.name, total, free, str(torch.version.cuda), (props.major, props.minor),
                    2 * PROBE_MATMUL_SIZE**3 / seconds / 1e12)
