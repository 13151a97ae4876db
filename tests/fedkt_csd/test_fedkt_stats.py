"""Site statistics: clipping, then exact integer per-class sums and outer products, equal to a hand computation."""

import numpy as np
import pytest
import torch

from fl_contract.fedkt_csd.wire import RING_DTYPE, fixed_point_scales, from_ring, ring_fields
from fl_contract.models.dcae import build_tiny_dcae
from site_agent.fedkt_csd.stats import (
    ENCODE_BATCH_SIZE,
    class_statistics,
    clip_latents,
    encode_latents,
    site_statistics,
)


def test_clipping_scales_only_long_latents():
    latents = torch.tensor([[3.0, 4.0], [0.6, 0.8], [0.0, 0.0]])

    clipped = clip_latents(latents, clip_norm=1.0)

    torch.testing.assert_close(clipped, torch.tensor([[0.6, 0.8], [0.6, 0.8], [0.0, 0.0]], dtype=torch.float64))


def test_class_statistics_are_the_integer_sums_of_the_quantised_latents():
    step, _ = fixed_point_scales(2.0)
    latents = torch.tensor([[3.0, 4.0], [-5.5 * step, 7.25 * step], [0.0, 2.0]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 2])  # the first latent is clipped from norm 5 to 2: (1.2, 1.6)

    vector = class_statistics(latents, labels, num_classes=3, clip_norm=2.0)

    q = np.array([[int(1.2 / step), int(1.6 / step)], [-5, 7]])  # truncated towards zero
    first = q.T @ q
    sums, outer_upper, counts = ring_fields(vector, num_classes=3)
    assert vector.dtype == RING_DTYPE
    np.testing.assert_array_equal(sums, [q.sum(axis=0), [0, 0], [0, 2**13]])
    np.testing.assert_array_equal(outer_upper, [[first[0, 0], first[0, 1], first[1, 1]], [0, 0, 0], [0, 0, 2**26]])
    np.testing.assert_array_equal(counts, [2, 0, 1])


def test_decoded_statistics_equal_the_float_computation_to_the_grid():
    latents = torch.tensor([[3.0, 4.0], [1.0, -1.0], [0.0, 2.0]])
    labels = torch.tensor([0, 0, 2])

    stats = from_ring(class_statistics(latents, labels, num_classes=3, clip_norm=2.0), 3, 2.0)

    clipped = np.array([1.2, 1.6])
    step, _ = fixed_point_scales(2.0)
    np.testing.assert_allclose(stats.sums, [clipped + [1, -1], [0, 0], [0, 2]], atol=2 * step)
    first = np.outer(clipped, clipped) + np.outer([1, -1], [1, -1])
    np.testing.assert_allclose(stats.outer_upper, [[first[0, 0], first[0, 1], first[1, 1]], [0, 0, 0], [0, 0, 4]],
                               atol=8 * step)


def test_quantized_latents_never_exceed_the_clip_norm():
    latents = torch.randn(500, 16, generator=torch.Generator().manual_seed(0)) * 10
    labels = torch.zeros(500, dtype=torch.long)

    _, outer_upper, _ = ring_fields(class_statistics(latents, labels, num_classes=1, clip_norm=1.5), 1)

    trace = outer_upper[0, [i * 16 - i * (i - 1) // 2 for i in range(16)]].sum()  # sum of ||q||^2
    assert trace <= 500 * 4**13
    assert trace > 500 * 4**13 * 0.999


def test_labels_out_of_range_are_refused():
    with pytest.raises(ValueError, match=r"labels must lie in 0..1"):
        class_statistics(torch.zeros(2, 3), torch.tensor([0, 2]), num_classes=2, clip_norm=1.0)


def test_encoder_needs_images_in_minus_one_to_one():
    model = build_tiny_dcae()

    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        encode_latents(model, torch.full((1, 3, 64, 64), 2.0))


def test_site_statistics_from_tiny_autoencoder_have_d128():
    model = build_tiny_dcae(seed=0).eval()
    images = torch.rand(6, 3, 64, 64, generator=torch.Generator().manual_seed(1)) * 2 - 1
    labels = torch.tensor([0, 1, 0, 1, 1, 0])

    stats = from_ring(site_statistics(model, images, labels, num_classes=2, clip_norm=1.0), 2, 1.0)

    assert stats.dim == 128
    np.testing.assert_array_equal(stats.counts, [3, 3])


def test_one_site_with_n_images_and_n_one_image_sites_sum_to_the_same_bits():
    model = build_tiny_dcae(seed=0).eval()
    n = ENCODE_BATCH_SIZE + 1  # one full batch and one padded
    images = torch.rand(n, 3, 64, 64, generator=torch.Generator().manual_seed(2)) * 2 - 1
    labels = torch.arange(n) % 3
    clip_norm = float(encode_latents(model, images).norm(dim=1).median())  # about half the latents are clipped

    one_site = site_statistics(model, images, labels, 3, clip_norm)
    one_image_sites = [site_statistics(model, images[i : i + 1], labels[i : i + 1], 3, clip_norm) for i in range(n)]
    uneven_sites = [site_statistics(model, images[a:b], labels[a:b], 3, clip_norm)
                    for a, b in [(0, 1), (1, 4), (4, 20), (20, n)]]

    np.testing.assert_array_equal(np.sum(one_image_sites, axis=0, dtype=RING_DTYPE), one_site)
    np.testing.assert_array_equal(np.sum(uneven_sites, axis=0, dtype=RING_DTYPE), one_site)


def test_encoding_restores_the_callers_determinism_settings():
    model = build_tiny_dcae(seed=0).eval()

    encode_latents(model, torch.zeros(1, 3, 64, 64))

    assert not torch.are_deterministic_algorithms_enabled()
