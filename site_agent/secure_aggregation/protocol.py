"""A site's part in one secure aggregation (Bonawitz et al. 2017): keys, shares, the masked vector, unmasking.

Held in the executor's memory for one session only; nothing of it is written to disk, and a site that restarts
simply drops out (the others recover the sum without it). The site checks every list the server sends before it
acts on it, so that a server that lies about who survived cannot make it reveal both secrets of one site: a site
listed as a survivor gets its self-mask seed share revealed, a dropped one its mask-key share, never both, and a
site answers one unmasking request per session. Primitives: `fl_contract.secure_aggregation`.

From `fl_contract.masking_graph.SPARSE_FROM` sites the graph is SecAgg+'s sparse one: the site works out its
neighbours itself from the session and the key exchange, shares its secrets among itself and them only, masks with
them only, accepts shares from them only, and checks every list within its neighbourhood too: at least the
neighbourhood's threshold (a majority of its holders) must have shared and must survive, else it refuses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fl_contract.ring import MIN_MASKED_SITES, RING_DTYPE
from fl_contract.secure_aggregation import (
    KEY_BYTES,
    SHARE_BYTES,
    AdvertisedKeys,
    SecureAggregationError,
    add_streams,
    check_subset,
    decrypt_shares,
    encrypt_shares,
    generate_keypair,
    majority_threshold,
    neighbourhoods,
    pairwise_seeds,
    split_secret,
)
from site_agent.privacy.policy import PolicyInForce
from site_agent.secure_aggregation.identity import SigningIdentity


def site_floor(kit: Path) -> int:
    """The fewest shares this site lets reconstruct its secrets, so the fewest sites a sum it joins may hold: its
    policy's `min_secure_aggregation_sites`, never below MIN_MASKED_SITES (with two, each could subtract its own
    part)."""
    policy = PolicyInForce.read(kit / "local").policy
    return max(MIN_MASKED_SITES, policy.min_secure_aggregation_sites if policy else MIN_MASKED_SITES)


class SecureAggregationSite:
    """`min_threshold`: the fewest shares the site lets reconstruct its secrets (besides a majority of the exchange).

    In the sparse graph a secret is rebuilt from a majority of the site's holders, and `min_threshold` (with a
    majority of the key exchange) is the fewest sites that must have shared and survive in the whole aggregation.

    With an `identity` (a provisioned kit) the site signs its keys and takes part only if every peer's keys are
    signed by that peer's certificate from the same federation (`site_agent.secure_aggregation.identity`).
    """

    def __init__(self, site: str, session: str, min_threshold: int, identity: SigningIdentity | None = None):
        self.site = site
        self.session = session
        self.min_threshold = min_threshold
        self.identity = identity
        self._mask_key, mask_public = generate_keypair()
        self._share_key, share_public = generate_keypair()
        unsigned = AdvertisedKeys(mask_public, share_public)
        self.advertised = unsigned if identity is None else AdvertisedKeys(
            mask_public, share_public, identity.certificate, identity.sign(unsigned.signed_message(session, site)))
        self._self_seed = os.urandom(KEY_BYTES)
        self._keys: dict[str, AdvertisedKeys] = {}  # the key exchange
        self._threshold = 0  # shares that rebuild one of our secrets
        self._quorum = 0  # sites that must share and survive in the whole aggregation
        self._holders: list[str] = []  # the holders of our shares: ourselves and our neighbours
        self._held: dict[str, tuple[bytes, bytes]] = {}  # sender -> its (mask-key share, self-seed share) for us
        self._sharing: list[str] = []  # the sites that shared, as the server listed them
        self._partners: list[str] = []  # those of our holders: whose shares we hold, whose masks are in our vector
        self._answered = False

    def share(self, keys: Mapping[str, AdvertisedKeys], threshold: int) -> dict[str, bytes]:
        """Shares of this site's mask key and self-mask seed, encrypted to each peer of the key exchange."""
        if keys.get(self.site) != self.advertised:
            raise SecureAggregationError(
                f"site {self.site}: the key exchange does not list this site with its own keys; "
                "refusing this aggregation")
        holders = sorted(keys)
        floor = max(self.min_threshold, majority_threshold(len(holders)))
        if floor > len(holders):
            raise SecureAggregationError(
                f"site {self.site}: {len(holders)} sites in the key exchange, but this site shares its "
                f"secrets only in aggregations of at least {floor} (its minimum); refusing")
        graph = neighbourhoods(self.session, keys)
        if graph.sparse:
            low, high = graph.threshold, graph.degree + 1
            if not low <= threshold <= high:
                raise SecureAggregationError(
                    f"site {self.site}: the server asks for a threshold of {threshold}, but with {len(holders)} "
                    f"sites each shares among itself and {graph.degree} neighbours and this site accepts a "
                    f"threshold from {low} (a majority of them) to {high}; refusing")
        elif not floor <= threshold <= len(holders):
            raise SecureAggregationError(
                f"site {self.site}: the server asks for a threshold of {threshold} among "
                f"{len(holders)} sites; this site shares its secrets only with a threshold from {floor} "
                f"to {len(holders)}")
        if self.identity is not None:
            for peer in holders:
                if peer != self.site:
                    advertised = keys[peer]
                    self.identity.verify(peer, advertised.certificate, advertised.signature,
                                         advertised.signed_message(self.session, peer))
        self._keys, self._threshold = dict(keys), threshold
        self._quorum = floor if graph.sparse else threshold
        self._holders = graph.holders(self.site)
        key_shares = split_secret(self._mask_key.private_bytes_raw(), threshold, self._holders)
        seed_shares = split_secret(self._self_seed, threshold, self._holders)
        self._held[self.site] = (key_shares[self.site], seed_shares[self.site])
        return {peer: encrypt_shares(self._share_key, keys[peer].share_key, self.session, self.site, peer,
                                     key_shares[peer] + seed_shares[peer])
                for peer in self._holders if peer != self.site}

    def mask(self, vector: np.ndarray, sharing: Sequence[str], ciphertexts: Mapping[str, bytes]) -> np.ndarray:
        """`vector` plus this site's self mask and its pairwise masks with every site that shared, mod 2^64.

        `ciphertexts` are the shares the other sharing sites encrypted for this site; all must be there and decrypt.
        """
        if vector.dtype != RING_DTYPE or vector.ndim != 1:
            raise ValueError(f"expected a 1-D little-endian uint64 vector, got {vector.dtype} {vector.shape}")
        if not self._keys:
            raise SecureAggregationError(f"site {self.site} has not shared its keys in session {self.session!r}")
        sharing = self._check_quorum(check_subset(sharing, self._keys, "sites that shared their keys", self.site),
                                     "sites that shared their keys")
        partners = self._check_neighbourhood(sharing, "shared their keys")
        senders = set(partners) - {self.site}
        strangers = sorted(set(ciphertexts) - set(self._holders))
        if strangers:
            raise SecureAggregationError(
                f"site {self.site}: the server relays shares from {', '.join(strangers)}, which the session's "
                "public randomness does not make neighbours of this site; refusing this aggregation")
        if set(ciphertexts) != senders:
            missing, extra = sorted(senders - set(ciphertexts)), sorted(set(ciphertexts) - senders)
            raise SecureAggregationError(
                f"site {self.site}: the server relays shares from {extra or 'no other site'} it did not "
                f"list and none from {missing or 'no listed site'}; refusing this aggregation")
        for sender in sorted(senders):
            plain = decrypt_shares(self._share_key, self._keys[sender].share_key, self.session, sender, self.site,
                                   ciphertexts[sender])
            if len(plain) != 2 * SHARE_BYTES:
                raise SecureAggregationError(
                    f"site {self.site}: the shares from {sender} are {len(plain)} bytes, expected "
                    f"{2 * SHARE_BYTES}")
            self._held[sender] = (plain[:SHARE_BYTES], plain[SHARE_BYTES:])
        self._sharing, self._partners = sharing, partners
        masked = vector.copy()
        add_streams(masked, [(self._self_seed, True), *pairwise_seeds(
            self._mask_key, self.site, {peer: self._keys[peer].mask_key for peer in senders}, self.session)])
        return masked

    def reveal(self, survivors: Sequence[str], dropped: Sequence[str]) -> tuple[dict[str, bytes], dict[str, bytes]]:
        """(self-mask seed shares of the survivors, mask-key shares of the dropped sites), once per session."""
        if not self._sharing:
            raise SecureAggregationError(
                f"site {self.site} sent no masked vector in session {self.session!r}; nothing to unmask")
        if self._answered:
            raise SecureAggregationError(
                f"site {self.site} has already answered the unmasking of session {self.session!r}; "
                "a second request is refused")
        survivors = self._check_quorum(check_subset(survivors, self._sharing, "survivors", self.site), "survivors")
        dropped = check_subset(dropped, self._sharing, "dropped sites", self.site)
        both = sorted(set(survivors) & set(dropped))
        if both or set(survivors) | set(dropped) != set(self._sharing):
            raise SecureAggregationError(
                f"site {self.site}: the server's survivors {survivors} and dropped sites {dropped} do not "
                f"split the sites that shared {self._sharing} (listed as both: {both or 'none'}); "
                "refusing to reveal any share")
        self._check_neighbourhood(survivors, "survive")
        self._answered = True
        return ({site: self._held[site][1] for site in survivors if site in self._partners},
                {site: self._held[site][0] for site in dropped if site in self._partners})

    def _check_quorum(self, sites: list[str], what: str) -> list[str]:
        if self.site not in sites:
            raise SecureAggregationError(f"site {self.site}: the server's {what} {sites} leave this site out")
        if len(sites) < self._quorum:
            raise SecureAggregationError(
                f"site {self.site}: only {len(sites)} {what} ({', '.join(sites)}), fewer than the "
                f"threshold {self._quorum}; refusing this aggregation")
        return sites

    def _check_neighbourhood(self, sites: list[str], what: str) -> list[str]:
        """Those of `sites` that hold this site's shares; at least the threshold must, or its masks stay."""
        local = [site for site in self._holders if site in set(sites)]
        if len(local) < self._threshold:
            raise SecureAggregationError(
                f"site {self.site}: only {len(local)} of the {len(self._holders)} holders of this site's shares "
                f"({', '.join(local) or 'none'}) {what}, fewer than the threshold {self._threshold}: its masks "
                "could not be removed; refusing this aggregation")
        return local
