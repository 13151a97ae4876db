"""The server's part in secure aggregation (Bonawitz et al. 2017): relay keys and shares, unmask the survivors' sum.

Four steps, each over the sites still present: the key exchange (each site's two public keys), the sharing (each
site's encrypted Shamir shares for every peer, relayed as they are), the masked vectors, and the unmasking (each
surviving site's shares of the survivors' self-mask seeds and of the dropped sites' mask keys). A site lost after
the sharing is removed: its mask key, rebuilt from t shares, cancels its pairwise masks in the survivors' sum,
which is then bit-exact to their plain sum. The server never holds both secrets of one site, so it learns no
single site's vector. Fewer than t sites at any step stops the aggregation naming the missing sites; the release
then needs a new session. Primitives: `fl_contract.secure_aggregation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fl_contract.fedkt_csd.wire import RING_DTYPE
from fl_contract.secure_aggregation import (
    SHARE_BYTES,
    AdvertisedKeys,
    SecureAggregationError,
    add_pairwise_masks,
    combine_shares,
    majority_threshold,
    mask_stream,
    public_bytes,
)


@dataclass(frozen=True)
class Revealed:
    """One surviving site's unmasking answer: shares of the survivors' self-mask seeds and the dropped mask keys."""

    self_seeds: Mapping[str, bytes]
    mask_keys: Mapping[str, bytes]


@dataclass
class SecureAggregation:
    """One session's state on the server; `min_sites` is the fewest sites whose sum may be released."""

    session: str
    min_sites: int
    keys: dict[str, AdvertisedKeys] = field(default_factory=dict)
    threshold: int = 0
    sharing: list[str] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    @property
    def key_exchange(self) -> list[str]:
        return sorted(self.keys)

    def start(self, keys: Mapping[str, AdvertisedKeys]) -> None:
        """Record the key exchange and set the threshold t: a majority of it, and at least `min_sites`."""
        self.keys = dict(keys)
        self.threshold = max(self.min_sites, majority_threshold(len(keys)))
        if len(keys) < self.threshold:
            raise SecureAggregationError(
                f"only {len(keys)} site(s) sent keys ({', '.join(self.key_exchange) or 'none'}); "
                f"secure aggregation needs at least {self.min_sites}")

    def relay(self, sent: Mapping[str, Mapping[str, bytes]]) -> dict[str, bytes]:
        """The sharing sites' ciphertexts as `sender/recipient` -> bytes, every one sent to every sharing site.

        Each ciphertext is encrypted to its recipient and authenticated with both names, so relaying all to all
        reveals nothing and lets each site pick its own.
        """
        self.sharing = self._quorum(sent, self.key_exchange, "shared their keys")
        for sender in self.sharing:
            expected = set(self.keys) - {sender}
            if set(sent[sender]) != expected:
                raise SecureAggregationError(
                    f"site {sender} sent shares for {sorted(sent[sender])}, expected one for each of "
                    f"{sorted(expected)}")
        return {f"{sender}/{recipient}": sent[sender][recipient]
                for sender in self.sharing for recipient in self.sharing if recipient != sender}

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

    def unmask(self, masked: Mapping[str, np.ndarray], revealed: Mapping[str, Revealed]) -> np.ndarray:
        """The survivors' plain sum mod 2^64 from their masked vectors and at least t unmasking answers."""
        responders = self._quorum(revealed, self.survivors, "answered the unmasking")
        total = np.zeros(masked[self.survivors[0]].size, dtype=RING_DTYPE)
        for site in self.survivors:
            np.add(total, masked[site], out=total)
        for site in self.survivors:
            seed = self._rebuild({r: revealed[r].self_seeds.get(site, b"") for r in responders}, site, "self-mask seed")
            np.subtract(total, mask_stream(seed, total.size), out=total)
        for site in self.dropped:
            raw = self._rebuild({r: revealed[r].mask_keys.get(site, b"") for r in responders}, site, "mask key")
            key = X25519PrivateKey.from_private_bytes(raw)
            if public_bytes(key) != self.keys[site].mask_key:
                raise SecureAggregationError(
                    f"the mask key of dropped site {site} rebuilt from the shares of "
                    f"{', '.join(responders)} does not match its public key: a share is wrong")
            add_pairwise_masks(total, key, site, {s: self.keys[s].mask_key for s in self.survivors}, self.session)
        return total

    def summary(self) -> dict[str, object]:
        """Who took part at each step, for results.json and the manifest."""
        return {"threshold": self.threshold, "key_exchange": self.key_exchange,
                "signed_keys": sorted(site for site, keys in self.keys.items() if keys.signature),
                "shared": self.sharing, "survivors": self.survivors, "dropped_after_sharing": self.dropped}

    def _quorum(self, received: Mapping[str, object], expected: list[str], step: str) -> list[str]:
        strangers = sorted(set(received) - set(expected))
        if strangers:
            raise SecureAggregationError(
                f"site(s) {', '.join(strangers)} {step} without being among {', '.join(expected)}; "
                "refusing the aggregation")
        present = sorted(received)
        if len(present) < self.threshold:
            missing = sorted(set(expected) - set(received))
            raise SecureAggregationError(
                f"only {len(present)} site(s) {step} ({', '.join(present) or 'none'}; missing: "
                f"{', '.join(missing)}), fewer than the threshold {self.threshold}: no sum is released; "
                "submit the job again when enough sites are connected")
        return present

    def _rebuild(self, shares: dict[str, bytes], site: str, what: str) -> bytes:
        """A secret from t shares; with more than t, a second set of t must agree (a wrong share is caught)."""
        bad = sorted(holder for holder, share in shares.items() if len(share) != SHARE_BYTES)
        if bad:
            raise SecureAggregationError(f"site(s) {', '.join(bad)} sent no share of the {what} of {site}")
        secret = combine_shares(shares, self.key_exchange, self.threshold)
        if len(shares) > self.threshold:
            other = dict(sorted(shares.items())[-self.threshold:])
            if combine_shares(other, self.key_exchange, self.threshold) != secret:
                raise SecureAggregationError(
                    f"the shares of the {what} of {site} from {', '.join(sorted(shares))} disagree: "
                    "a site sent a wrong share")
        return secret
