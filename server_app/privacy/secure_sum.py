"""The three tasks after a secure aggregation's key exchange, as every masking workflow sends them.

FedKT-CSD collects the keys with a task of their own; the weight kinds with each round's training task (the site
trains, then makes its keys). Either way `SecureAggregation.start` has the keys; this sends the shares task to the
key exchange, the masked task (with the relayed ciphertexts, of which each site is sent its own:
server_app.privacy.addressed_ciphertexts) to the sites that shared, and the unmask task
to the sites that sent a masked vector, and returns their sum. Each task goes only to the sites that answered the
one before, so a site lost on the way is dropped, and its masks removed, by the next step. Messages:
`fl_contract.secure_aggregation_messages`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract import secure_aggregation_messages as messages
from server_app.privacy.secure_aggregation import Revealed, SecureAggregation

Send = Callable[[str, FLModel, list[str] | None], dict[str, FLModel]]
"""Send a task's data to the target sites (None: all) and wait; the results of the sites that answered, by name."""


def secure_sum(secagg: SecureAggregation, masked_task: str, send: Send, log: Callable[[str], None],
               warn: Callable[[str], None], what: str = "masked updates") -> np.ndarray:
    """Shares, masked vectors (task `masked_task`, `what` in the log) and unmasking after `secagg.start`; the
    survivors' sum mod 2^64.

    Raises SecureAggregationError naming the sites when fewer than the threshold remain at any step."""
    log(f"key exchange with {', '.join(secagg.key_exchange)} (threshold {secagg.threshold}); requesting shares")
    meta = {messages.SESSION: secagg.session}
    shares = send(messages.TASK_SHARES, FLModel(params=messages.key_exchange_params(secagg.keys),
                                                meta={**meta, messages.THRESHOLD: secagg.threshold}),
                  secagg.key_exchange)
    relayed = secagg.relay({site: {peer: messages.from_wire(c) for peer, c in r.params.items()}
                            for site, r in shares.items()})
    log(f"{', '.join(secagg.sharing)} shared their keys; requesting {what}")
    ciphertexts = {pair: messages.to_wire(ciphertext) for pair, ciphertext in relayed.items()}
    results = send(masked_task, FLModel(params=ciphertexts, meta={**meta, messages.SITES: secagg.sharing}),
                   secagg.sharing)
    masked = {site: r.params[messages.MASKED] for site, r in results.items()}
    secagg.collect(masked)
    if secagg.dropped:
        warn(f"site(s) {', '.join(secagg.dropped)} shared their keys but sent no {what}: their masks are "
             f"removed with the other sites' shares and the sum goes on with {', '.join(secagg.survivors)}")
    answers = send(messages.TASK_UNMASK, FLModel(params={}, meta={
        **meta, messages.SURVIVORS: secagg.survivors, messages.DROPPED: secagg.dropped}), secagg.survivors)
    return secagg.unmask(masked, {site: Revealed(*messages.read_revealed(r.params)) for site, r in answers.items()})
