"""Which precision a site computes in, decided from the device's facts (testable without a GPU)."""

from __future__ import annotations

import pytest
import torch

from fl_contract.precision import FLOAT32_CPU, Precision, choose_precision, select_precision


@pytest.mark.parametrize(
    ("device_type", "capability", "dtype", "scaler", "described"),
    [
        ("cpu", None, None, False, "float32"),
        ("cuda", (9, 0), torch.bfloat16, False, "mixed precision (bfloat16 autocast, no scaler)"),  # H100 / H200
        ("cuda", (8, 0), torch.bfloat16, False, "mixed precision (bfloat16 autocast, no scaler)"),  # A100
        ("cuda", (7, 5), torch.float16, True, "mixed precision (float16 autocast, gradient scaling)"),  # T4
        ("cuda", (7, 0), torch.float16, True, "mixed precision (float16 autocast, gradient scaling)"),  # V100
    ],
)
def test_bfloat16_where_the_gpu_runs_it_float16_with_a_scaler_on_older_gpus_float32_on_the_cpu(
        device_type, capability, dtype, scaler, described):
    chosen = choose_precision(device_type, capability)

    assert (chosen.device_type, chosen.autocast_dtype, chosen.uses_scaler) == (device_type, dtype, scaler)
    assert chosen.describe() == described


def test_a_cuda_device_without_its_capability_is_refused():
    with pytest.raises(ValueError, match="compute capability"):
        choose_precision("cuda")


def test_on_the_cpu_nothing_changes_the_arithmetic():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    loss = (a @ b).sum()

    with FLOAT32_CPU.autocast():
        inside = a @ b
    scaler = FLOAT32_CPU.scaler()

    assert select_precision(torch.device("cpu")) == FLOAT32_CPU
    assert inside.dtype == torch.float32 and torch.equal(inside, a @ b)
    assert not scaler.is_enabled() and scaler.scale(loss) is loss


def test_an_autocast_precision_computes_in_its_dtype():
    bf16 = Precision("cpu", torch.bfloat16, uses_scaler=False)  # the CPU runs bfloat16 autocast too

    with bf16.autocast():
        product = torch.randn(4, 4) @ torch.randn(4, 4)

    assert product.dtype == torch.bfloat16
