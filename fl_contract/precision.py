"""The one place that decides in which floating-point precision a site computes.

bfloat16 autocast without a gradient scaler on CUDA GPUs that run it natively (compute capability 8.0 and up:
Ampere, Hopper, Blackwell): it has float32's exponent range, so gradients do not underflow. float16 autocast with a
gradient scaler on older CUDA GPUs. float32 everywhere on the CPU, so CPU results stay the same bits as without
this module. The decision is a pure function of the facts (`choose_precision`), tested on any machine;
`select_precision` reads those facts from the device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

BF16_MIN_CAPABILITY = (8, 0)
"""The first CUDA compute capability with native bfloat16 tensor-core kernels (Ampere)."""


@dataclass(frozen=True)
class Precision:
    """How one device computes: the autocast dtype (None: plain float32) and whether gradients need scaling."""

    device_type: str
    autocast_dtype: torch.dtype | None
    uses_scaler: bool

    @property
    def name(self) -> str:
        return "float32" if self.autocast_dtype is None else str(self.autocast_dtype).removeprefix("torch.")

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """Mixed precision for the forward pass and loss; nothing at all in float32."""
        if self.autocast_dtype is None:
            yield
        else:
            with torch.autocast(device_type=self.device_type, dtype=self.autocast_dtype):
                yield

    def scaler(self) -> torch.amp.GradScaler:
        """A gradient scaler, a pass-through (scale 1, plain `optimizer.step`) unless the precision needs one."""
        return torch.amp.GradScaler(self.device_type, enabled=self.uses_scaler)

    def describe(self) -> str:
        """For the site's log: what the task computes in."""
        if self.autocast_dtype is None:
            return "float32"
        return f"mixed precision ({self.name} autocast{', gradient scaling' if self.uses_scaler else ', no scaler'})"


FLOAT32_CPU = Precision("cpu", None, False)


def choose_precision(device_type: str, compute_capability: tuple[int, int] | None = None) -> Precision:
    """The precision for a device of `device_type` ("cpu" or "cuda") with CUDA `compute_capability` (major, minor)."""
    if device_type != "cuda":
        return Precision(device_type, None, False)
    if compute_capability is None:
        raise ValueError("a CUDA device needs its compute capability to choose a precision")
    if compute_capability >= BF16_MIN_CAPABILITY:
        return Precision("cuda", torch.bfloat16, False)
    return Precision("cuda", torch.float16, True)


def select_precision(device: torch.device) -> Precision:
    """The precision this site uses on `device`."""
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    return choose_precision(device.type, capability)
