"""The GPU benchmarks are one command each and, on a machine without CUDA, say so and exit with status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

GPU_BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu"
SCRIPTS = ("segmentation_amp.py", "dcae_encode.py", "loader_vs_step.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without a CUDA GPU")
def test_each_gpu_benchmark_exits_2_with_a_message_without_cuda():
    runs = {name: subprocess.Popen([sys.executable, str(GPU_BENCH / name)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True) for name in SCRIPTS}

    for name, run in runs.items():
        out, err = run.communicate(timeout=120)
        assert run.returncode == 2, (name, out, err)
        assert f"{name}: needs a CUDA GPU and a CUDA build of torch" in err and "Nothing was measured." in err
        assert out == ""
