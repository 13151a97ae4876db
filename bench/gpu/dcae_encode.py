"""FedKT-CSD encoding with DC-AE f32c32 on a CUDA GPU: images/s of the site's path vs the bare encoder and vs the
GPU's bfloat16 limit for this encoder.

The autoencoder is diffusers' `AutoencoderDC` in the published "dc-ae-f32c32-in-1.0" configuration
(`fl_contract.models.dcae.f32c32_config`), built here with random weights from seed 0: nothing is downloaded, and the
speed does not depend on the weights. The encoder has 123M parameters; a 64 x 64 image gives a (32, 2, 2) latent.

- bare encoder: `model.encode(x).latent` on images already on the GPU, batches of the site's default GPU size, in the
  site's precision (bfloat16 autocast where supported), inference mode, cuDNN autotuning on;
- site encoding: `site_agent.fedkt_csd.stats.encode_latents` from the images in CPU memory, as the site holds them
  (upload, fixed padded batches, deterministic kernels, latents back to the CPU as float32);
- site statistics: `site_statistics`, the above plus float64 clipping, fixed point and the per-class integer sums;
- limit: the GPU's measured bfloat16 matmul rate (`fl_contract.device.probe_gpu`) over the encoder's FLOPs per image
  (torch's FLOP counter).

Goals: site encoding within 1.02x of the bare encoder's time, and at least 0.4 of the limit. Exits with status 2 and a
message where there is no CUDA GPU.

    python bench/gpu/dcae_encode.py [--images 8192 --size 64 --repeats 3] [--write-readme]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
from cuda_only import NO_CUDA, publish, require_cuda, timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=8192)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write-readme", action="store_true", help="also put the table into bench/README.md")
    args = parser.parse_args()
    device = require_cuda(__file__)
    if device is None:
        return NO_CUDA

    from diffusers import AutoencoderDC
    from torch.utils.flop_counter import FlopCounterMode

    from fl_contract.device import probe_gpu
    from fl_contract.models.dcae import f32c32_config
    from fl_contract.precision import select_precision
    from site_agent.fedkt_csd.stats import default_encode_batch_size, encode_latents, site_statistics

    torch.manual_seed(0)
    model = AutoencoderDC(**f32c32_config()).requires_grad_(False).eval().to(device)
    precision = select_precision(device)
    batch = default_encode_batch_size(device)
    generator = torch.Generator().manual_seed(1)
    images = torch.rand(args.images, 3, args.size, args.size, generator=generator) * 2 - 1
    labels = torch.arange(args.images) % 4
    on_gpu = images.to(device)

    def bare() -> None:
        with torch.inference_mode(), precision.autocast():
            for x in on_gpu.split(batch):
                model.encode(x)

    with FlopCounterMode(display=False) as counter, torch.inference_mode(), precision.autocast():
        model.encode(on_gpu[:batch])
    flops_per_image = counter.get_total_flops() / batch
    tflops = probe_gpu(device, precision.autocast_dtype or torch.float32).matmul_tflops
    limit = tflops * 1e12 / flops_per_image

    paths = {"bare encoder (images on the GPU)": bare,
             "site encoding (encode_latents)": lambda: encode_latents(model, images),
             "site statistics (site_statistics)": lambda: site_statistics(model, images, labels, 4, 1.0)}
    for work in paths.values():  # warm-up: cuDNN autotuning, cuBLAS handles
        work()
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.repeats):  # interleaved, so drift in clocks or temperature hits every path alike
        for name, work in paths.items():
            seconds[name].append(timed(work)[0])
    rates = {name: args.images / statistics.median(times) for name, times in seconds.items()}
    bare_rate = rates["bare encoder (images on the GPU)"]

    lines = [f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}; DC-AE "
             f"f32c32 encoder (random weights), {args.images} images of {args.size} x {args.size}, batch {batch}, "
             f"{precision.describe()}, median of {args.repeats}; encoder {flops_per_image / 1e9:.2f} GFLOP per image, "
             f"measured matmul {tflops:.0f} TFLOP/s, so a limit of {limit:,.0f} images/s",
             "", "| path | images/s | time ratio to bare | fraction of the limit |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {name} | {rate:,.0f} | {bare_rate / rate:.3f}x | {rate / limit:.2f} |"
              for name, rate in rates.items()]
    publish("gpu_dcae_encode", "\n".join(lines), args.write_readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
