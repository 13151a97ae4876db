"""What every GPU benchmark shares: refuse to run without CUDA (exit status 2, saying why), time on the GPU, print
the result and (`--write-readme`) put it between the benchmark's markers in bench/README.md."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

NO_CUDA = 2


def require_cuda(script: str) -> torch.device | None:
    """The CUDA device, or None after printing why `script` measured nothing (the caller exits with NO_CUDA)."""
    if torch.cuda.is_available():
        torch.backends.cudnn.benchmark = True
        return torch.device("cuda")
    print(f"{Path(script).name}: needs a CUDA GPU and a CUDA build of torch; none is visible here "
          f"(torch {torch.__version__}, torch.cuda.is_available() is False). Nothing was measured.", file=sys.stderr)
    return None


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """(seconds, peak GiB of GPU memory allocated) while `work` runs, synchronised before and after."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    work()
    torch.cuda.synchronize()
    return time.perf_counter() - start, torch.cuda.max_memory_allocated() / 2**30


def publish(section: str, text: str, write_readme: bool) -> None:
    """Print `text`; with `write_readme`, also replace the `section` markers' content in bench/README.md."""
    print(text)
    if write_readme:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from readme_section import write_section

        write_section(section, text)
