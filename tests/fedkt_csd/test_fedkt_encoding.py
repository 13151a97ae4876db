"""FedKT-CSD encoding in the site's batch size: the device's default, or the site's `encode_batch_size`."""

from __future__ import annotations

import numpy as np
import torch
from diffusers import AutoencoderDC

from fl_contract.fedkt_csd.wire import RING_DTYPE
from fl_contract.models.dcae import build_tiny_dcae, f32c32_config, latent_shape
from site_agent.fedkt_csd.stats import ENCODE_BATCH_SIZE, default_encode_batch_size, encode_latents, site_statistics


def test_the_cpu_default_is_the_fixed_batch_of_32():
    model = build_tiny_dcae(seed=0).eval()
    images = torch.rand(5, 3, 64, 64, generator=torch.Generator().manual_seed(1)) * 2 - 1

    assert default_encode_batch_size(torch.device("cpu")) == ENCODE_BATCH_SIZE == 32
    assert default_encode_batch_size(torch.device("cuda")) == 256
    assert torch.equal(encode_latents(model, images), encode_latents(model, images, batch_size=32))


def test_any_site_batch_size_keeps_the_sums_independent_of_the_partition():
    model = build_tiny_dcae(seed=0).eval()
    n = 11
    images = torch.rand(n, 3, 64, 64, generator=torch.Generator().manual_seed(2)) * 2 - 1
    labels = torch.arange(n) % 2

    one_site = site_statistics(model, images, labels, 2, 1.0, encode_batch_size=4)
    sites = [site_statistics(model, images[a:b], labels[a:b], 2, 1.0, encode_batch_size=4)
             for a, b in [(0, 3), (3, 11)]]
    latents = encode_latents(model, images, batch_size=4)

    np.testing.assert_array_equal(np.sum(sites, axis=0, dtype=RING_DTYPE), one_site)
    assert latents.dtype == torch.float32 and latents.shape == (n, 128)
    torch.testing.assert_close(latents, encode_latents(model, images), rtol=0, atol=1e-4)  # other kernels, same latents


def test_the_published_f32c32_configuration_builds_its_123m_parameter_encoder():
    with torch.device("meta"):  # sizes only: no memory, no weights
        model = AutoencoderDC(**f32c32_config())

    assert sum(p.numel() for p in model.encoder.parameters()) == 123_172_384
    assert latent_shape(model, 64) == (32, 2, 2)
