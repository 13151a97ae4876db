"""Secure aggregation with dropout recovery: the survivors' sum is exact, a lone message says nothing, and every
list the server sends is checked by the sites before they act on it."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pytest
import torch

from fl_contract.fedkt_csd.wire import RING_DTYPE, from_ring
from fl_contract.secure_aggregation import SecureAggregationError, combine_shares, mask_stream, pair_seed, split_secret
from server_app.privacy.secure_aggregation import Revealed, SecureAggregation
from site_agent.fedkt_csd.stats import class_statistics
from site_agent.secure_aggregation.protocol import SecureAggregationSite

SESSION = "job-1234/attempt-1"
CLIP_NORM = 3.0


def _aggregate(vectors: dict[str, np.ndarray], *, min_sites: int = 3, silent_at_sharing: Collection[str] = (),
               dropped: Collection[str] = (), silent_at_unmasking: Collection[str] = ()) -> np.ndarray:
    """The four steps in-process, as the job runs them; sites in each collection stop answering from that step on."""
    sites = {name: SecureAggregationSite(name, SESSION, min_threshold=min_sites) for name in vectors}
    server = SecureAggregation(SESSION, min_sites)
    server.start({name: site.advertised for name, site in sites.items()})
    sent = {name: site.share(server.keys, server.threshold) for name, site in sites.items()
            if name not in silent_at_sharing}
    relayed = server.relay(sent)
    masked = {name: sites[name].mask(vectors[name], server.sharing, _addressed_to(name, relayed))
              for name in server.sharing if name not in dropped}
    server.collect(masked)
    revealed = {name: Revealed(*sites[name].reveal(server.survivors, server.dropped))
                for name in server.survivors if name not in silent_at_unmasking}
    return server.unmask(masked, revealed)


def _addressed_to(site: str, relayed: dict[str, bytes]) -> dict[str, bytes]:
    return {key.split("/")[0]: value for key, value in relayed.items() if key.split("/")[1] == site}


def _vectors(count: int, length: int = 50) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(count)
    return {f"site-{i}": rng.integers(0, 2**63, length, dtype=np.uint64) for i in range(count)}


def _plain_sum(vectors: dict[str, np.ndarray], sites: Collection[str]) -> np.ndarray:
    return np.sum([vectors[s] for s in sites], axis=0, dtype=RING_DTYPE)


def _latents(n: int = 600, dim: int = 8, num_classes: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, dim, generator=generator) * 2.0, torch.randint(0, num_classes, (n,), generator=generator)


def test_every_site_present_gives_the_plain_sum():
    vectors = _vectors(5)

    np.testing.assert_array_equal(_aggregate(vectors), _plain_sum(vectors, vectors))


@pytest.mark.parametrize("dropped", [["site-0"], ["site-2"], ["site-3", "site-6"]])
def test_sites_lost_after_sharing_are_removed_and_the_survivors_sum_is_exact(dropped):
    vectors = _vectors(7)

    total = _aggregate(vectors, dropped=dropped)

    np.testing.assert_array_equal(total, _plain_sum(vectors, set(vectors) - set(dropped)))


def test_sites_lost_at_each_step_up_to_the_threshold():
    vectors = _vectors(9)  # threshold 5

    total = _aggregate(vectors, silent_at_sharing=["site-8"], dropped=["site-0", "site-4"],
                       silent_at_unmasking=["site-1"])

    np.testing.assert_array_equal(total, _plain_sum(vectors, set(vectors) - {"site-8", "site-0", "site-4"}))


def test_below_the_threshold_the_aggregation_stops_naming_the_missing_sites():
    vectors = _vectors(4)  # threshold 3

    with pytest.raises(SecureAggregationError,
                       match=r"only 2 site\(s\) sent masked statistics .*missing: site-1, site-3\), "
                             r"fewer than the threshold 3"):
        _aggregate(vectors, dropped=["site-1", "site-3"])
    with pytest.raises(SecureAggregationError, match=r"only 2 site\(s\) answered the unmasking .*missing: site-2\)"):
        _aggregate(vectors, dropped=["site-3"], silent_at_unmasking=["site-2"])


def test_statistics_aggregate_identically_over_3_and_10_sites_with_one_lost():
    latents, labels = _latents()
    sums = {}
    for num_sites in (3, 10):
        parts = np.array_split(np.arange(len(labels)), num_sites)
        vectors = {f"site-{i:02d}": class_statistics(latents[p], labels[p], 4, CLIP_NORM) for i, p in enumerate(parts)}
        vectors["site-99"] = class_statistics(latents[:50], labels[:50], 4, CLIP_NORM)  # sends keys, then drops
        sums[num_sites] = _aggregate(vectors, dropped=["site-99"])

    np.testing.assert_array_equal(sums[3], sums[10])
    np.testing.assert_array_equal(sums[3], class_statistics(latents, labels, 4, CLIP_NORM))
    np.testing.assert_array_equal(from_ring(sums[3], 4, CLIP_NORM).to_flat(),
                                  from_ring(sums[10], 4, CLIP_NORM).to_flat())


def test_one_masked_message_is_unrelated_to_the_plain_statistics():
    latents, labels = _latents(n=3000, dim=32, num_classes=10)
    vector = class_statistics(latents, labels, 10, CLIP_NORM)
    site = SecureAggregationSite("site-1", SESSION, min_threshold=3)
    peers = {name: SecureAggregationSite(name, SESSION, min_threshold=3) for name in ("site-0", "site-2")}
    keys = {"site-1": site.advertised, **{name: peer.advertised for name, peer in peers.items()}}
    site.share(keys, 3)
    sent = {name: peer.share(keys, 3)["site-1"] for name, peer in peers.items()}

    masked = site.mask(vector, sorted(keys), sent)

    plain = vector.view(np.int64).astype(float)
    correlation = np.corrcoef(plain, masked.astype(float))[0, 1]
    top_bytes = np.bincount((masked >> np.uint64(56)).astype(np.int64), minlength=256)
    expected = masked.size / 256
    assert abs(correlation) < 4 / np.sqrt(masked.size)
    assert ((top_bytes - expected) ** 2 / expected).sum() < 350  # 255 degrees of freedom: p ~ 1e-4 at 350
    assert abs((masked >> np.uint64(63)).mean() - 0.5) < 4 * 0.5 / np.sqrt(masked.size)


def test_a_site_never_reveals_both_secrets_of_one_site_nor_answers_twice():
    vectors = _vectors(4)
    sites = {name: SecureAggregationSite(name, SESSION, min_threshold=3) for name in vectors}
    keys = {name: site.advertised for name, site in sites.items()}
    relayed = SecureAggregation(SESSION, 3)
    relayed.start(keys)
    shares = relayed.relay({name: site.share(keys, relayed.threshold) for name, site in sites.items()})
    site = sites["site-0"]
    site.mask(vectors["site-0"], sorted(keys), _addressed_to("site-0", shares))

    with pytest.raises(SecureAggregationError, match=r"listed as both: \['site-2'\]"):
        site.reveal(["site-0", "site-1", "site-2"], ["site-2", "site-3"])
    with pytest.raises(SecureAggregationError, match="do not split the sites that shared"):
        site.reveal(["site-0", "site-1", "site-2"], [])  # site-3 unaccounted for
    with pytest.raises(SecureAggregationError, match="leave this site out"):
        site.reveal(["site-1", "site-2", "site-3"], ["site-0"])
    site.reveal(["site-0", "site-1", "site-2"], ["site-3"])
    with pytest.raises(SecureAggregationError, match="already answered the unmasking"):
        site.reveal(sorted(keys), [])


def test_a_site_refuses_a_low_threshold_a_foreign_key_list_and_altered_shares():
    sites = {f"site-{i}": SecureAggregationSite(f"site-{i}", SESSION, min_threshold=3) for i in range(5)}
    keys = {name: site.advertised for name, site in sites.items()}

    with pytest.raises(SecureAggregationError, match="threshold of 2 among 5 sites; .*threshold from 3 to 5"):
        sites["site-0"].share(keys, 2)
    with pytest.raises(SecureAggregationError, match="does not list this site with its own keys"):
        sites["site-0"].share({**keys, "site-0": keys["site-1"]}, 3)
    sent = {name: site.share(keys, 3) for name, site in sites.items()}
    for_site_0 = {sender: shares["site-0"] for sender, shares in sent.items() if sender != "site-0"}
    altered = {**for_site_0, "site-3": for_site_0["site-3"][:-1] + bytes([for_site_0["site-3"][-1] ^ 1])}
    with pytest.raises(SecureAggregationError, match="shares from site-3 to site-0 do not decrypt"):
        sites["site-0"].mask(np.zeros(4, dtype=RING_DTYPE), sorted(keys), altered)
    swapped = {**for_site_0, "site-3": for_site_0["site-4"]}
    with pytest.raises(SecureAggregationError, match="shares from site-3 to site-0 do not decrypt"):
        sites["site-0"].mask(np.zeros(4, dtype=RING_DTYPE), sorted(keys), swapped)
    with pytest.raises(SecureAggregationError, match="among the sites that shared their keys, but they were not"):
        sites["site-0"].mask(np.zeros(4, dtype=RING_DTYPE), [*sorted(keys), "site-9"], for_site_0)


def test_a_wrong_share_of_a_dropped_mask_key_is_caught():
    vectors = _vectors(4)
    sites = {name: SecureAggregationSite(name, SESSION, min_threshold=3) for name in vectors}
    server = SecureAggregation(SESSION, 3)
    server.start({name: site.advertised for name, site in sites.items()})
    relayed = server.relay({name: site.share(server.keys, server.threshold) for name, site in sites.items()})
    masked = {name: sites[name].mask(vectors[name], server.sharing, _addressed_to(name, relayed))
              for name in ("site-0", "site-1", "site-2")}
    server.collect(masked)
    revealed = {name: Revealed(*sites[name].reveal(server.survivors, server.dropped)) for name in server.survivors}
    wrong = dict(revealed["site-1"].mask_keys)
    wrong["site-3"] = bytes(32)

    with pytest.raises(SecureAggregationError,
                       match="mask key of dropped site site-3 .* does not match its public key"):
        server.unmask(masked, {**revealed, "site-1": Revealed(revealed["site-1"].self_seeds, wrong)})


def test_shamir_shares_rebuild_from_any_threshold_subset_and_pair_seeds_agree():
    holders = [f"site-{i}" for i in range(5)]
    secret = bytes(range(32))
    shares = split_secret(secret, 3, holders)

    assert combine_shares({h: shares[h] for h in ("site-0", "site-2", "site-4")}, holders, 3) == secret
    assert combine_shares({h: shares[h] for h in ("site-1", "site-3", "site-4")}, holders, 3) == secret
    a, b = SecureAggregationSite("a", SESSION, 2), SecureAggregationSite("b", SESSION, 2)
    ab = pair_seed(a._mask_key, b.advertised.mask_key, SESSION, "a", "b")
    assert ab == pair_seed(b._mask_key, a.advertised.mask_key, SESSION, "b", "a")
    assert ab != pair_seed(a._mask_key, b.advertised.mask_key, "another-session", "a", "b")
    np.testing.assert_array_equal(mask_stream(ab, 50), mask_stream(ab, 100)[:50])
