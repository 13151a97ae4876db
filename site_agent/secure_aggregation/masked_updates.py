"""A site's part in a masked round: after training, the update becomes a masked vector; the weights never leave.

With the job's `secure_aggregation` on (the job's parameters, which the site's guard checked against its policy,
decide; never the server's message), the round's `train` task trains as usual, then checks the update (finite,
the shapes sent, L2 norm of the difference within the job's bound, sample count) and encodes it
(`fl_contract.masked_weights`), and answers with fresh keys instead of weights. The `shares`, `masked_update` and
`unmask` tasks then run Bonawitz et al.'s protocol (`site_agent.secure_aggregation.protocol`) on that vector. Keys and
vector live in this object's memory for one round's session only: every round starts with new keys, new shares and
a new self-mask seed, bound to the session the server names (job, round and attempt), so nothing the server is
given to unmask one round opens another.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract import secure_aggregation_messages as messages
from fl_contract.masked_weights import GROUPS, TASK_MASKED, WeightGroups
from site_agent.secure_aggregation.identity import SigningIdentity
from site_agent.secure_aggregation.protocol import SecureAggregationSite, site_floor

TASKS = (messages.TASK_SHARES, TASK_MASKED, messages.TASK_UNMASK)


class MaskedUpdates:
    """One site's masked rounds, one session at a time; `l2_bound` is the job's `update_l2_bound`."""

    def __init__(self, site: str, l2_bound: float):
        self.site = site
        self.l2_bound = l2_bound
        self._secagg: SecureAggregationSite | None = None
        self._vector: np.ndarray | None = None

    def begin(self, received: FLModel, trained: FLModel, kit: Path) -> FLModel:
        """The train task's answer: the trained update checked and encoded here, the site's keys sent instead.

        Metrics and the task's other meta (PLayer-FL's sensitivity curve) still go in the clear; the sample count
        goes only inside the masked vector."""
        self._secagg, self._vector = None, None  # a new round forgets the last one's keys, whatever happened to it
        meta = received.meta or {}
        session = meta.get(messages.SESSION)
        if not session or GROUPS not in meta:
            raise RuntimeError(f"site {self.site}: this job masks every update (secure_aggregation), but the server's "
                               "train task carries no secure-aggregation session; no weights are sent in the clear")
        try:
            groups = WeightGroups.of(meta[GROUPS], received.params or {})
            vector = groups.encode(received.params or {}, trained.params or {},
                                   (trained.meta or {}).get(FLMetaKey.NUM_STEPS_CURRENT_ROUND, 0), self.l2_bound)
        except ValueError as err:  # MaskedUpdateError included
            raise RuntimeError(f"site {self.site}: its update is not sent: {err}") from err
        self._secagg = SecureAggregationSite(self.site, str(session), site_floor(kit), SigningIdentity.from_kit(kit))
        self._vector = vector
        clear = {k: v for k, v in (trained.meta or {}).items() if k != FLMetaKey.NUM_STEPS_CURRENT_ROUND}
        return FLModel(params=messages.keys_params(self._secagg.advertised), metrics=trained.metrics, meta=clear)

    def answer(self, task: str, model: FLModel) -> FLModel:
        """The site's answer to one of the session's later tasks (`TASKS`)."""
        secagg = self._session(model)
        if task == messages.TASK_SHARES:
            shares = secagg.share(messages.read_key_exchange(model.params), int(model.meta[messages.THRESHOLD]))
            return FLModel(params={peer: messages.to_wire(ciphertext) for peer, ciphertext in shares.items()})
        if task == TASK_MASKED:
            if self._vector is None:  # sent once: a second mask of the same vector under new peers' keys would leak
                raise RuntimeError(f"site {self.site} has already sent its masked update of session "
                                   f"{secagg.session!r}; a second request is refused")
            masked = secagg.mask(self._vector, model.meta[messages.SITES],
                                 messages.addressed_to(self.site, model.params))
            self._vector = None
            return FLModel(params={messages.MASKED: masked})
        self._secagg = None  # one unmasking answer per session: its secrets go with it
        self_seeds, mask_keys = secagg.reveal(model.meta[messages.SURVIVORS], model.meta[messages.DROPPED])
        return FLModel(params=messages.revealed_params(self_seeds, mask_keys))

    def _session(self, model: FLModel) -> SecureAggregationSite:
        session = (model.meta or {}).get(messages.SESSION)
        if self._secagg is None or session != self._secagg.session:
            held = self._secagg.session if self._secagg else None
            raise RuntimeError(f"site {self.site} has no keys for session {session!r} (it holds keys for {held!r}): "
                               "each round's train task makes them; a site that restarted rejoins at the next round")
        return self._secagg
