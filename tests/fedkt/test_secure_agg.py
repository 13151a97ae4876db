"""Secure aggregation: masks cancel exactly, the sum does not depend on the partition, a lone message says nothing."""

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fl_contract.fedkt.wire import from_ring
from server_app.privacy.unmask import unmask_sum
from site_agent.fedkt.stats import class_statistics
from site_agent.secure_agg import generate_keypair, mask_stream, mask_vector, pair_seed

JOB = "job-1234"
CLIP_NORM = 3.0


def _key_exchange(sites, seed=0):
    """Deterministic keys, one per site, as the server would relay them."""
    rng = np.random.default_rng(seed)
    private = {site: X25519PrivateKey.from_private_bytes(rng.bytes(32)) for site in sites}
    return private, {site: key.public_key().public_bytes_raw() for site, key in private.items()}


def _masked_messages(vectors):
    private, public = _key_exchange(vectors)
    return {site: mask_vector(vector, site, private[site], public, JOB) for site, vector in vectors.items()}


def _latents(n=600, dim=8, num_classes=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, dim, generator=generator) * 2.0, torch.randint(0, num_classes, (n,), generator=generator)


def test_pairwise_masks_sum_to_zero_mod_2_64():
    zeros = {f"site-{i}": np.zeros(1000, dtype=np.uint64) for i in range(5)}

    total = unmask_sum(_masked_messages(zeros), zeros)

    np.testing.assert_array_equal(total, 0)


def test_both_ends_of_a_pair_derive_the_same_seed_bound_to_job_and_pair():
    private, public = _key_exchange(["a", "b", "c"])

    ab = pair_seed(private["a"], public["b"], JOB, "a", "b")

    assert ab == pair_seed(private["b"], public["a"], JOB, "b", "a")
    assert ab != pair_seed(private["a"], public["b"], "another-job", "a", "b")
    assert ab != pair_seed(private["a"], public["c"], JOB, "a", "c")


def test_aggregate_is_identical_for_1_3_and_10_sites():
    latents, labels = _latents()
    sums = {}

    for num_sites in (1, 3, 10):
        parts = np.array_split(np.arange(len(labels)), num_sites)
        vectors = {f"site-{i:02d}": class_statistics(latents[p], labels[p], 4, CLIP_NORM) for i, p in enumerate(parts)}
        sums[num_sites] = unmask_sum(_masked_messages(vectors), vectors)

    np.testing.assert_array_equal(sums[1], sums[3])
    np.testing.assert_array_equal(sums[1], sums[10])
    np.testing.assert_array_equal(sums[1], class_statistics(latents, labels, 4, CLIP_NORM))  # the plain sum
    decoded = {k: from_ring(v, 4, CLIP_NORM).to_flat() for k, v in sums.items()}
    np.testing.assert_array_equal(decoded[1], decoded[10])


def test_one_masked_message_is_unrelated_to_the_plain_statistics():
    latents, labels = _latents(n=3000, dim=32, num_classes=10)
    parts = np.array_split(np.arange(len(labels)), 3)
    vectors = {f"site-{i}": class_statistics(latents[p], labels[p], 10, CLIP_NORM) for i, p in enumerate(parts)}

    masked = _masked_messages(vectors)["site-1"]

    plain = vectors["site-1"].view(np.int64).astype(float)
    correlation = np.corrcoef(plain, masked.astype(float))[0, 1]
    top_bytes = np.bincount((masked >> np.uint64(56)).astype(np.int64), minlength=256)
    expected = masked.size / 256
    chi_square = ((top_bytes - expected) ** 2 / expected).sum()
    assert abs(correlation) < 4 / np.sqrt(masked.size)
    assert chi_square < 350  # 255 degrees of freedom: p ~ 1e-4 at 350
    assert abs((masked >> np.uint64(63)).mean() - 0.5) < 4 * 0.5 / np.sqrt(masked.size)


def test_missing_site_is_named_and_nothing_is_unmasked():
    vectors = {f"site-{i}": np.arange(10, dtype=np.uint64) for i in range(4)}
    masked = _masked_messages(vectors)
    del masked["site-2"]

    with pytest.raises(ValueError, match=r"site\(s\) site-2 took part in the key exchange but sent no"):
        unmask_sum(masked, vectors)


def test_site_outside_the_key_exchange_is_refused():
    vectors = {f"site-{i}": np.arange(10, dtype=np.uint64) for i in range(2)}
    masked = _masked_messages(vectors)

    with pytest.raises(ValueError, match="site-9 sent masked statistics without"):
        unmask_sum({**masked, "site-9": np.zeros(10, dtype=np.uint64)}, vectors)


def test_vectors_of_different_length_are_refused():
    with pytest.raises(ValueError, match="one common length"):
        unmask_sum({"a": np.zeros(3, dtype=np.uint64), "b": np.zeros(4, dtype=np.uint64)}, ["a", "b"])


def test_mask_stream_is_deterministic_by_seed():
    seed = bytes(range(32))

    first, second = mask_stream(seed, 100), mask_stream(seed, 100)

    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(mask_stream(seed, 50), first[:50])


def test_site_must_be_listed_with_its_own_public_key():
    private, public = _key_exchange(["a", "b"])
    _, foreign = generate_keypair()

    with pytest.raises(ValueError, match="does not list site 'a'"):
        mask_vector(np.zeros(3, dtype=np.uint64), "a", private["a"], {**public, "a": foreign}, JOB)
