"""The server's part in secure aggregation (Bonawitz et al. 2017): relay keys and shares, unmask the survivors' sum.

Four steps, each over the sites still present: the key exchange (each site's two public keys), the sharing (each
site's encrypted Shamir shares for every peer, relayed as they are), the masked vectors, and the unmasking (each
surviving site's shares of the survivors' self-mask seeds and of the dropped sites' mask keys). A site lost after
the sharing is removed: its mask key, rebuilt from t shares, cancels its pairwise masks in the survivors' sum,
which is then bit-exact to their plain sum. The server never holds both secrets of one site, so it learns no
single site's vector. Fewer than t sites at any step stops the aggregation naming the missing sites; the release
then needs a new session. Primitives: `fl_contract.secure_aggregation`.

From `fl_contract.masking_graph.SPARSE_FROM` sites the graph is SecAgg+'s sparse one: each site shares among and
masks with its k neighbours only, so the server relays n k ciphertexts, rebuilds each secret from a majority of that
site's k + 1 holders, and regenerates a lost site's masks with its surviving neighbours only. Every step still
needs a majority of the key exchange (and `min_sites`); a site whose holders fall below the neighbourhood threshold
stops the aggregation, naming it. All secrets are rebuilt in one batch (`fl_contract.shamir`) and the keystreams
are generated on several threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fl_contract import shamir
from fl_contract.masking_graph import MaskingGraph
from fl_contract.ring import RING_DTYPE
from fl_contract.secure_aggregation import (
    SHARE_BYTES,
    AdvertisedKeys,
    SecureAggregationError,
    add_streams,
    majority_threshold,
    neighbourhoods,
    pairwise_seeds,
    public_bytes,
)


@dataclass(frozen=True)
class Revealed:
    """One surviving site's unmasking answer: shares of the survivors' self-mask seeds and the dropped mask keys."""

    self_seeds: Mapping[str, bytes]
    mask_keys: Mapping[str, bytes]


@dataclass
class SecureAggregation:
    """One session's state on the server; `min_sites` is the fewest sites whose sum may be released.

    `threshold`: the shares that rebuild one secret; `quorum`: the sites needed at every step (the same number with
    the complete graph; with the sparse one a majority of each site's holders, and of the key exchange).
    """

    session: str
    min_sites: int
    keys: dict[str, AdvertisedKeys] = field(default_factory=dict)
    threshold: int = 0
    quorum: int = 0
    graph: MaskingGraph | None = None
    sharing: list[str] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    @property
    def key_exchange(self) -> list[str]:
        return sorted(self.keys)

    def start(self, keys: Mapping[str, AdvertisedKeys]) -> None:
        """Record the key exchange and set the threshold t: a majority of it, and at least `min_sites` (in the
        sparse graph: a majority of a site's holders, with that quorum at every step)."""
        self.keys = dict(keys)
        self.graph = neighbourhoods(self.session, keys)
        self.quorum = max(self.min_sites, majority_threshold(len(keys)))
        self.threshold = self.graph.threshold if self.graph.sparse else self.quorum
        if len(keys) < self.quorum:
            raise SecureAggregationError(
                f"only {len(keys)} site(s) sent keys ({', '.join(self.key_exchange) or 'none'}); "
                f"secure aggregation needs at least {self.min_sites}")

    def relay(self, sent: Mapping[str, Mapping[str, bytes]]) -> dict[str, bytes]:
        """The sharing sites' ciphertexts for their sharing neighbours (every other site with the complete graph)
        as `sender/recipient` -> bytes; the masked task carries them all, and the server's task-data filter sends
        each site only its own (server_app.privacy.addressed_ciphertexts).

        Each ciphertext is encrypted to its recipient and authenticated with both names, so relaying all to all
        would reveal nothing, but costs each site n k of 92 bytes instead of k.
        """
        self.sharing = self._quorum(sent, self.key_exchange, "shared their keys")
        graph = self._graph()
        for sender in self.sharing:
            expected = set(graph.neighbours(sender))
            if set(sent[sender]) != expected:
                raise SecureAggregationError(
                    f"site {sender} sent shares for {sorted(sent[sender])}, expected one for each of "
                    f"{sorted(expected)}")
        self._check_holders(self.sharing, self.sharing, "shared their keys")
        shared = set(self.sharing)
        return {f"{sender}/{recipient}": sent[sender][recipient]
                for sender in self.sharing for recipient in graph.neighbours(sender) if recipient in shared}

    def collect(self, masked: Mapping[str, np.ndarray]) -> None:
        """Record which sharing sites sent a masked vector (the survivors) and which dropped."""
        self.survivors = self._quorum(masked, self.sharing, "sent masked statistics")
        self.dropped = sorted(set(self.sharing) - set(self.survivors))
        lengths = {vector.size for vector in masked.values()}
        for site, vector in masked.items():
            if vector.dtype != RING_DTYPE or vector.ndim != 1 or len(lengths) != 1:
                raise SecureAggregationError(
                    f"site {site} sent a {vector.dtype} vector of shape {vector.shape}; expected 1-D "
                    f"uint64 vectors of one common length (lengths received: {sorted(lengths)})")
        self._check_holders(self.sharing, self.survivors, "sent masked statistics")

    def unmask(self, masked: Mapping[str, np.ndarray], revealed: Mapping[str, Revealed]) -> np.ndarray:
        """The survivors' plain sum mod 2^64 from their masked vectors and at least t unmasking answers."""
        responders = self._quorum(revealed, self.survivors, "answered the unmasking")
        graph = self._graph()
        total = np.zeros(masked[self.survivors[0]].size, dtype=RING_DTYPE)
        for site in self.survivors:
            np.add(total, masked[site], out=total)
        lost = [site for site in self.dropped if set(graph.neighbours(site)) & set(self.survivors)]
        wanted = [(site, "self-mask seed", {r: revealed[r].self_seeds for r in responders}) for site in self.survivors]
        wanted += [(site, "mask key", {r: revealed[r].mask_keys for r in responders}) for site in lost]
        secrets = self._rebuild(wanted)
        streams = [(secrets[i], False) for i in range(len(self.survivors))]
        survivors = set(self.survivors)
        for site, raw in zip(lost, secrets[len(self.survivors):], strict=True):
            key = X25519PrivateKey.from_private_bytes(raw)
            if public_bytes(key) != self.keys[site].mask_key:
                raise SecureAggregationError(
                    f"the mask key of dropped site {site} rebuilt from the shares of "
                    f"{', '.join(r for r in responders if r in graph.holders(site))} does not match its public "
                    "key: a share is wrong")
            peers = {s: self.keys[s].mask_key for s in graph.neighbours(site) if s in survivors}
            streams += pairwise_seeds(key, site, peers, self.session)
        add_streams(total, streams)
        return total

    def summary(self) -> dict[str, object]:
        """Who took part at each step, for results.json and the manifest."""
        sparse = {"neighbours_per_site": self.graph.degree} if self.graph is not None and self.graph.sparse else {}
        return {"threshold": self.threshold, "key_exchange": self.key_exchange,
                "signed_keys": sorted(site for site, keys in self.keys.items() if keys.signature),
                "shared": self.sharing, "survivors": self.survivors, "dropped_after_sharing": self.dropped, **sparse}

    def _quorum(self, received: Mapping[str, object], expected: list[str], step: str) -> list[str]:
        strangers = sorted(set(received) - set(expected))
        if strangers:
            raise SecureAggregationError(
                f"site(s) {', '.join(strangers)} {step} without being among {', '.join(expected)}; "
                "refusing the aggregation")
        present = sorted(received)
        if len(present) < self.quorum:
            missing = sorted(set(expected) - set(received))
            raise SecureAggregationError(
                f"only {len(present)} site(s) {step} ({', '.join(present) or 'none'}; missing: "
                f"{', '.join(missing)}), fewer than the threshold {self.quorum}: no sum is released; "
                "submit the job again when enough sites are connected")
        return present

    def _graph(self) -> MaskingGraph:
        if self.graph is None:
            raise SecureAggregationError(f"session {self.session!r} has no key exchange yet: call start first")
        return self.graph

    def _check_holders(self, sites: list[str], present: list[str], step: str) -> None:
        """Every one of `sites` must keep a threshold of its holders among `present` (only the sparse graph can
        fail this after the quorum holds); raises naming the sites whose masks could not be removed."""
        graph, here = self._graph(), set(present)
        short = {site: [h for h in graph.holders(site) if h in here and h != site] for site in sites}
        short = {site: left for site, left in short.items() if len(left) + (site in here) < self.threshold}
        if short:
            raise SecureAggregationError(
                "; ".join(f"site {site}: only {len(left) + (site in here)} of the {graph.degree + 1} holders "
                          f"of its shares {step} ({', '.join(left) or 'no neighbour'})" for site, left in short.items())
                + f", fewer than the threshold {self.threshold}: its masks could not be removed and no sum is "
                "released; submit the job again when enough sites are connected")

    def _rebuild(self, wanted: list[tuple[str, str, dict[str, Mapping[str, bytes]]]]) -> list[bytes]:
        """Each wanted secret from the shares of its holders; with more than t, rebuilt again without the first
        share and compared (a wrong share is caught). All in one batch: shares of one secret use x = holder rank."""
        graph, requests = self._graph(), []
        for site, what, answers in wanted:
            holders = graph.holders(site)
            given = {h: answers[h].get(site, b"") for h in holders if h in answers}
            bad = sorted(holder for holder, share in given.items() if len(share) != SHARE_BYTES)
            if bad:
                raise SecureAggregationError(f"site(s) {', '.join(bad)} sent no share of the {what} of {site}")
            if len(given) < self.threshold:
                raise SecureAggregationError(
                    f"only {len(given)} holder(s) of the {what} of {site} answered the unmasking "
                    f"({', '.join(given) or 'none'}), fewer than the threshold {self.threshold}: no sum is released")
            rank = {holder: x for x, holder in enumerate(holders, start=1)}
            requests.append({rank[h]: share for h, share in given.items()})
        secrets, disagree = shamir.rebuild(requests, graph.degree + 1, self.threshold)
        if disagree:
            site, what, answers = wanted[disagree[0]]
            raise SecureAggregationError(
                f"the shares of the {what} of {site} from {', '.join(h for h in graph.holders(site) if h in answers)} "
                "disagree: a site sent a wrong share")
        return secrets
