"""Secure aggregation at scale: the batched Shamir rebuild agrees with pycryptodome's, the SecAgg+ sparse graph is the
one the public randomness gives and meets its stated bounds, its sum is exact with lost sites, and a server that
lies within or across neighbourhoods is refused."""

from __future__ import annotations

import os
import random
from collections.abc import Collection

import numpy as np
import pytest
from Crypto.Protocol.SecretSharing import Shamir
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from scipy.stats import hypergeom

from fl_contract import masking_graph, shamir
from fl_contract.fedkt_csd.wire import RING_DTYPE
from fl_contract.secure_aggregation import (
    SecureAggregationError,
    add_streams,
    combine_shares,
    mask_stream,
    neighbourhoods,
    public_bytes,
)
from server_app.privacy.secure_aggregation import Revealed, SecureAggregation
from site_agent.secure_aggregation.protocol import SecureAggregationSite

SESSION = "job-5678/attempt-1"


@pytest.fixture
def sparse_from_30(monkeypatch):
    """The sparse graph from 30 sites (k = 22 at 40), so that the adversarial tests stay small."""
    monkeypatch.setattr(masking_graph, "SPARSE_FROM", 30)


class Session:
    """One session through the relay of the shares, with the sites and the server as the job holds them."""

    def __init__(self, count: int, length: int = 6):
        rng = np.random.default_rng(count)
        self.vectors = {f"site-{i:03d}": rng.integers(0, 2**64, length, dtype=RING_DTYPE) for i in range(count)}
        self.sites = {name: SecureAggregationSite(name, SESSION, min_threshold=3) for name in self.vectors}
        self.server = SecureAggregation(SESSION, 3)
        self.server.start({name: site.advertised for name, site in self.sites.items()})
        self.sent = {name: site.share(self.server.keys, self.server.threshold) for name, site in self.sites.items()}
        self.relayed = self.server.relay(self.sent)
        self.graph = neighbourhoods(SESSION, self.server.keys)

    def inbox(self, site: str) -> dict[str, bytes]:
        return {pair.split("/")[0]: c for pair, c in self.relayed.items() if pair.split("/")[1] == site}

    def mask(self, dropped: Collection[str] = ()) -> dict[str, np.ndarray]:
        return {name: self.sites[name].mask(self.vectors[name], self.server.sharing, self.inbox(name))
                for name in self.server.sharing if name not in dropped}


def _plain_sum(vectors: dict[str, np.ndarray], sites: Collection[str]) -> np.ndarray:
    return np.sum([vectors[s] for s in sites], axis=0, dtype=RING_DTYPE)


def test_batched_rebuild_agrees_with_pycryptodome_both_ways_and_catches_a_wrong_share():
    rng = random.Random(7)
    holders, threshold = 15, 8  # pycryptodome's pure-Python field is slow: few secrets
    secrets = [os.urandom(32) for _ in range(8)]
    ours = shamir.split(secrets, threshold, holders)
    theirs = [list(zip(*(Shamir.split(threshold, holders, half) for half in (s[:16], s[16:])), strict=True))
              for s in secrets]
    requests, expected, full = [], [], []
    for secret, mine, pycrypto in zip(secrets, ours, theirs, strict=True):
        chosen = rng.sample(range(holders), rng.randint(threshold, holders))
        for part in (0, 16):  # our shares rebuild with pycryptodome's combine
            assert Shamir.combine([(x + 1, mine[x][part:part + 16]) for x in chosen[:threshold]]) == \
                secret[part:part + 16]
        full.append({x + 1: pycrypto[x][0][1] + pycrypto[x][1][1] for x in range(holders)})
        requests.append({x + 1: full[-1][x + 1] for x in chosen})  # theirs rebuild with ours
        expected.append(secret)
    rebuilt, disagree = shamir.rebuild(requests, holders, threshold)
    assert rebuilt == expected and disagree == []
    for index, position in ((3, 0), (5, -1)):  # one wrong share: the first, the last of a secret with more than t
        wrong = [dict(r) for r in requests]
        wrong[index] = dict(rng.sample(sorted(full[index].items()), threshold + 1))
        x = sorted(wrong[index])[position]
        wrong[index][x] = bytes(b ^ 1 for b in wrong[index][x])
        assert len(wrong[index]) > threshold
        assert shamir.rebuild(wrong, holders, threshold)[1] == [index]
    a, b = rng.getrandbits(128), rng.getrandbits(128)
    assert shamir.multiply_int(shamir.multiply_int(a, b), shamir.inverse_int(b)) == a
    with pytest.raises(ValueError, match=r"secrets \[0\] have fewer than 8 shares"):
        shamir.rebuild([dict(list(requests[0].items())[:7])], holders, threshold)


def test_the_sparse_graph_is_regular_symmetric_and_given_by_the_session_and_the_keys():
    keys = {f"site-{i:04d}": os.urandom(64) for i in range(300)}
    graph = masking_graph.build(SESSION, keys)

    assert graph.sparse and graph.degree == masking_graph.sparse_degree(300) == 42 and graph.threshold == 22
    for site in keys:
        assert len(graph.neighbours(site)) == 42 and site not in graph.neighbours(site)
        assert all(site in graph.neighbours(peer) for peer in graph.neighbours(site))
    assert masking_graph.build(SESSION, dict(reversed(keys.items()))) == graph  # the order keys arrive in: none
    assert masking_graph.build("job-5678/attempt-2", keys).order != graph.order
    assert masking_graph.build(SESSION, {**keys, "site-0007": os.urandom(64)}).order != graph.order
    small = masking_graph.build(SESSION, dict(list(keys.items())[:99]))
    assert not small.sparse and small.neighbours("site-0000") == sorted(keys)[1:99]


@pytest.mark.parametrize("n", [100, 300, 1000])
def test_the_degree_is_the_smallest_meeting_the_stated_bounds(n):
    colluding, lost = int(masking_graph.COLLUDING * n), int(masking_graph.LOST * n)

    def bounds(k: int) -> tuple[float, float, float]:
        t = (k + 1) // 2 + 1
        return (n * hypergeom.sf(t - 1, n - 1, colluding, k), n * n / 2 * ((colluding + lost) / n) ** k,
                n * hypergeom.sf(k - t, n - 1, lost, k))

    k = masking_graph.sparse_degree(n)
    privacy, connected, correct = bounds(k)
    assert privacy <= 2.0**-40 and connected <= 2.0**-40 and correct <= 2.0**-30
    privacy, connected, correct = bounds(k - 2)
    assert privacy > 2.0**-40 or connected > 2.0**-40 or correct > 2.0**-30


def test_sparse_aggregation_of_100_sites_is_exact_with_sites_lost_at_each_step():
    session = Session(100)
    assert session.server.summary()["neighbours_per_site"] == 24 and session.server.threshold == 13
    assert len(session.relayed) == 100 * 24  # each site's shares go to its neighbours only
    dropped = {"site-003", "site-010", "site-041", "site-077", "site-098"}
    masked = session.mask(dropped)
    session.server.collect(masked)
    silent = {"site-050", "site-051"}
    revealed = {name: Revealed(*session.sites[name].reveal(session.server.survivors, session.server.dropped))
                for name in session.server.survivors if name not in silent}

    total = session.server.unmask(masked, revealed)

    np.testing.assert_array_equal(total, _plain_sum(session.vectors, set(session.vectors) - dropped))
    assert all(len(answer.self_seeds) + len(answer.mask_keys) <= 25 for answer in revealed.values())


def test_a_server_splitting_a_site_between_survivors_and_dropped_gets_neither_secret(sparse_from_30):
    session = Session(40)
    target = "site-007"
    holders = session.graph.holders(target)
    told_survived = [h for h in holders if h != target][:11]
    told_dropped = [h for h in holders if h not in told_survived and h != target]
    survivors = list(session.server.sharing)
    masked = session.mask()
    seeds, keys = {}, {}
    for holder in holders:  # each holder sees a valid split, but not the same one
        lie = [s for s in survivors if s != target] if holder in told_dropped else survivors
        answer = session.sites[holder].reveal(lie, sorted(set(survivors) - set(lie)))
        if target in answer[0]:
            seeds[holder] = answer[0][target]
        if target in answer[1]:
            keys[holder] = answer[1][target]

    threshold = session.server.threshold
    assert len(seeds) + len(keys) == len(holders) == 23 and threshold == 12
    assert min(len(seeds), len(keys)) < threshold  # a majority threshold: at most one of the two
    rebuilt = combine_shares(keys, holders, len(keys))  # the best the server can do with the key shares it got
    assert public_bytes(X25519PrivateKey.from_private_bytes(rebuilt)) != session.server.keys[target].mask_key
    with pytest.raises(SecureAggregationError, match=r"threshold of 11, .* 22 neighbours .* from 12 \(a majority"):
        session.sites["site-000"].share(session.server.keys, 11)  # nor can the server lower the threshold
    assert len(masked) == 40


def test_a_site_refuses_shares_and_partners_the_public_randomness_does_not_give(sparse_from_30):
    session = Session(40)
    site = "site-000"
    stranger = next(s for s in session.vectors if s not in session.graph.holders(site))
    forged = SecureAggregationSite(stranger, SESSION, 3)  # a colluder's ciphertext, addressed to site-000
    forged_keys = {**session.server.keys, stranger: forged.advertised}
    ciphertexts = {**session.inbox(site), stranger: b"\0" * 92}

    with pytest.raises(SecureAggregationError, match=f"shares from {stranger}, which the session's public "
                                                     "randomness does not make neighbours"):
        session.sites[site].mask(session.vectors[site], session.server.sharing, ciphertexts)
    other = masking_graph.build("another-session", {s: k.mask_key + k.share_key for s, k in forged_keys.items()})
    picked = {peer: b"\0" * 92 for peer in other.neighbours(site)}  # shares routed by a graph of the server's choice
    with pytest.raises(SecureAggregationError, match="which the session's public randomness does not make"):
        session.sites[site].mask(session.vectors[site], session.server.sharing, picked)
    server = SecureAggregation(SESSION, 3)
    server.start(session.server.keys)
    wrong = {**session.sent, site: {peer: b"\0" * 92 for peer in other.neighbours(site)}}
    with pytest.raises(SecureAggregationError, match=f"site {site} sent shares for .*expected one for each of"):
        server.relay(wrong)


def test_too_few_survivors_in_one_neighbourhood_stops_the_server_and_the_site(sparse_from_30):
    session = Session(40)
    target = "site-020"
    neighbours = session.graph.neighbours(target)
    dropped = neighbours[:11]  # 11 of 22 neighbours: 12 of its 23 holders remain, the threshold
    masked = session.mask(dropped)
    session.server.collect(masked)  # exactly the threshold is enough
    enough = (list(session.server.survivors), list(session.server.dropped))
    masked_more = session.mask([*dropped, neighbours[11]])

    with pytest.raises(SecureAggregationError, match=f"site {target}: only 11 of the 23 holders of its shares "
                                                     r"sent masked statistics .*fewer than the threshold 12"):
        session.server.collect(masked_more)
    survivors = [s for s in session.server.sharing if s not in {*dropped, neighbours[11]}]
    with pytest.raises(SecureAggregationError, match=r"only 11 of the 23 holders of this site's shares .* survive, "
                                                     "fewer than the threshold 12"):
        session.sites[target].reveal(survivors, sorted(set(session.server.sharing) - set(survivors)))
    assert target in session.sites[target].reveal(*enough)[0]  # the refusal answered nothing: it can answer now


def test_keystreams_summed_on_threads_equal_the_serial_sum():
    seeds = [(os.urandom(32), i % 3 != 0) for i in range(64)]
    length = 1 << 16  # 64 streams of 2^16 words: past the size from which threads are used
    serial = np.zeros(length, dtype=RING_DTYPE)
    for seed, add in seeds:
        (np.add if add else np.subtract)(serial, mask_stream(seed, length), out=serial)
    threaded = np.zeros(length, dtype=RING_DTYPE)

    add_streams(threaded, seeds, workers=3)

    np.testing.assert_array_equal(threaded, serial)
