"""Which sites mask and share secrets with which: Bonawitz's complete graph, or SecAgg+'s sparse one from
`SPARSE_FROM` sites (Bell, Bonawitz, Gascón, Lepoint, Raykova: "Secure Single-Server Aggregation with
(Poly)Logarithmic Overhead", CCS 2020).

With the complete graph every site masks with, and shares its two secrets among, all n sites: the server regenerates
lost x n keystreams and rebuilds n secrets from about n/2 shares each. In the sparse graph every site has k = O(log n)
neighbours: it masks with them and shares among its *holders* (itself and its neighbours, k + 1 sites, x-coordinates
their rank in name order), and a secret is rebuilt from `threshold` = a majority of its k + 1 holders, the complete
graph's rule applied to the neighbourhood. The graph is the Harary graph H(n, k) (position p adjacent to
p +- 1 ... p +- k/2 on a ring) under a random order of the sites, Bell et al.'s choice; the order is public
randomness: the sites sorted by SHA-256 of a seed and their name, the seed a SHA-256 of a label, the session and the
key exchange (names and public keys, in name order). Every site computes it from what it already has, so the server
cannot choose a site's neighbours without changing the keys it relays, which fresh keys from every site make
unpredictable.

k is the smallest even degree for which, with C = floor(COLLUDING x n) colluding sites and D = floor(LOST x n) lost
ones fixed independently of the order, union bounds over the n sites give (exact hypergeometric tails, integer
arithmetic, so that every machine finds the same k; Bell et al. bound the same three events):

- privacy: P[some honest site has >= t colluders among its k neighbours] <= 2^-PRIVACY_BITS: fewer than t can
  rebuild the secret the server does not get;
- privacy: P[the honest surviving sites' graph is disconnected] <= 2^-PRIVACY_BITS: on the ring, that needs two
  runs of k/2 positions all colluding or lost, at most n^2/2 ((C + D) / n)^k; otherwise the server learns the sum of
  each part, not only of all of them;
- correctness: P[some site keeps fewer than t surviving holders] <= 2^-CORRECTNESS_BITS (a failure stops the
  aggregation naming the sites; it never releases a wrong sum).

Because t is a majority of a site's holders, a server that tells some holders a site survived and others that it
was lost still collects fewer than t shares of one of its two secrets, as with the complete graph. What the sparse
graph cannot give is the complete graph's tolerance of any minority: matching t - 1 ~ n/2 colluders and n - t lost
needs k close to n. At COLLUDING = LOST = 1/10: k = 24 at 100 sites, 42 at 300, 54 at 1000, 64 at 10,000 (1/3 each
would need 338 at 1000). Below `SPARSE_FROM`, or where no k < n - 1 meets the bounds, the graph is complete.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from math import comb

SPARSE_FROM = 100  # sites in the key exchange from which the graph is sparse
COLLUDING = Fraction(1, 10)  # the fraction of sites that may collude with the server (gamma)
LOST = Fraction(1, 10)  # the fraction of sites that may be lost after sharing (delta)
PRIVACY_BITS = 40  # sigma
CORRECTNESS_BITS = 30  # eta
_ORDER_LABEL = b"hospital-fl/secagg/neighbour-order/v1"


@dataclass(frozen=True)
class MaskingGraph:
    """The graph of one session: `order` the sites on the ring, `degree` k (n - 1 for the complete graph)."""

    order: tuple[str, ...]
    degree: int
    _position: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_position", {site: p for p, site in enumerate(self.order)})

    @property
    def sparse(self) -> bool:
        return self.degree < len(self.order) - 1

    @property
    def threshold(self) -> int:
        """Shares that rebuild a secret in the sparse graph: a majority of a site's k + 1 holders."""
        return (self.degree + 1) // 2 + 1

    def neighbours(self, site: str) -> list[str]:
        """The sites `site` masks with and shares among, in name order."""
        if not self.sparse:
            return sorted(s for s in self.order if s != site)
        n, p = len(self.order), self._position[site]
        return sorted(self.order[(p + step) % n] for offset in range(1, self.degree // 2 + 1)
                      for step in (offset, -offset))

    def holders(self, site: str) -> list[str]:
        """The holders of `site`'s shares in name order (share x is the x-th, from 1): itself and its neighbours."""
        return sorted([site, *self.neighbours(site)])


def build(session: str, public_keys: Mapping[str, bytes]) -> MaskingGraph:
    """The session's graph from its key exchange (site name -> its public keys, as relayed)."""
    names = sorted(public_keys)
    degree = sparse_degree(len(names)) if len(names) >= SPARSE_FROM else len(names) - 1
    if degree >= len(names) - 1:
        return MaskingGraph(tuple(names), len(names) - 1)
    seed = hashlib.sha256(_ORDER_LABEL + _prefixed(session.encode()) + b"".join(
        _prefixed(name.encode()) + _prefixed(public_keys[name]) for name in names)).digest()
    order = sorted(names, key=lambda name: hashlib.sha256(seed + name.encode()).digest())
    return MaskingGraph(tuple(order), degree)


@lru_cache(maxsize=64)
def sparse_degree(n: int) -> int:
    """The smallest even k meeting the module's three bounds for n sites; n - 1 (complete) if none below it does."""
    colluding, lost = int(COLLUDING * n), int(LOST * n)
    for k in range(2, n - 1, 2):
        t = (k + 1) // 2 + 1
        if (n * n * (colluding + lost) ** k << PRIVACY_BITS) > 2 * n**k:
            continue
        if n * _tail(n - 1, colluding, k, t) << PRIVACY_BITS > comb(n - 1, k):
            continue
        if n * _tail(n - 1, lost, k, k - t + 1) << CORRECTNESS_BITS > comb(n - 1, k):
            continue
        return k
    return n - 1


def _tail(population: int, marked: int, draws: int, at_least: int) -> int:
    """comb(population, draws) x P[at least `at_least` marked among `draws` drawn without replacement]."""
    return sum(comb(marked, i) * comb(population - marked, draws - i)
               for i in range(at_least, min(marked, draws) + 1))


def _prefixed(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data
