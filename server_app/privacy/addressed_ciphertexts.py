"""Each site is sent only the secure-aggregation ciphertexts addressed to it, not every sharing site's.

The masked task's data is built once for all sharing sites (`server_app.privacy.secure_sum`): every ciphertext of
the round, as `sender/recipient`, n x k of 92 bytes with the sparse graph (about 5 MB per site at 1000 sites, for
the 54 it needs). Relaying them all reveals nothing (each is encrypted to its recipient and authenticated with both
names) but costs every site the whole federation's traffic. FLARE sends one task's data to every target (its
broadcast copies it per site and does not support changing it per site), so this server-side task-data filter,
which FLARE runs once per site as the task leaves the server, keeps the ciphertexts whose recipient is that site.
The site reads its own the same way either way (`fl_contract.secure_aggregation_messages.addressed_to`), and the
transfer meter counts what actually left (`server_app.transfers`, after the filters).
"""

from __future__ import annotations

from nvflare.apis.dxo import DXO, from_shareable
from nvflare.apis.filter import Filter
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable

from fl_contract import secure_aggregation_messages as messages


class AddressedCiphertexts(Filter):
    """For the tasks it is configured for: keep the `sender/<this site>` entries of a masked task's params."""

    def process(self, shareable: Shareable, fl_ctx: FLContext) -> Shareable:
        peer = fl_ctx.get_peer_context()
        site = peer.get_identity_name() if peer is not None else None
        dxo = from_shareable(shareable)
        if not site or messages.SITES not in (dxo.meta or {}):  # not a masked task's relay
            return shareable
        own = {pair: value for pair, value in dxo.data.items() if pair.split("/", 1)[-1] == site}
        return DXO(dxo.data_kind, own, dict(dxo.meta)).update_shareable(shareable)
