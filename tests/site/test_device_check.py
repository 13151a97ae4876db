"""`site-agent check`'s device row: the GPU's name, memory, CUDA version and a short matmul, or the CPU."""

from __future__ import annotations

import pytest
import torch

from fl_contract.device import GpuFacts
from site_agent.kit.preflight import OK, WARN, check_device, gpu_result
from site_agent.kit.site_config import write_site_config
from site_agent.kit.startup import SiteKit

GIB = 2**30


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without a CUDA GPU")
def test_without_a_cuda_gpu_the_row_says_the_cpu_will_be_used(tmp_path):
    write_site_config(tmp_path, {})
    kit = SiteKit(tmp_path, "site-1", "localhost", 8002, "server")

    row = check_device(kit)

    assert row.status == OK
    assert row.detail.startswith("no CUDA GPU, will use the CPU (") and f"torch {torch.__version__}" in row.detail


def test_a_gpu_row_names_the_gpu_its_memory_cuda_and_matmul_speed():
    facts = GpuFacts("NVIDIA H200", 141 * GIB, 139 * GIB, "12.8", (9, 0), 712.4)

    row = gpu_result(facts, "mixed precision (bfloat16 autocast, no scaler)", "2.13.0+cu128")

    assert row.status == OK
    assert row.detail == ("NVIDIA H200, 141 GiB (139.0 GiB free), CUDA 12.8, compute capability 9.0, mixed precision "
                          "(bfloat16 autocast, no scaler), matmul 712 TFLOP/s, torch 2.13.0+cu128")


def test_a_gpu_with_little_free_memory_warns_with_the_fix():
    facts = GpuFacts("Tesla T4", 15 * GIB, 2 * GIB, "12.8", (7, 5), 25.0)

    row = gpu_result(facts, "mixed precision (float16 autocast, gradient scaling)", "2.13.0+cu128")

    assert row.status == WARN and "nvidia-smi" in row.fix and "batch_size / roi_size" in row.fix
