"""The server's task-data filter sends each site only the secure-aggregation ciphertexts addressed to it, and leaves
every other task's data alone (the end-to-end bytes: tests/jobs/test_fedavg_linear.py, masked run)."""

from __future__ import annotations

import numpy as np
from nvflare.apis.fl_constant import ReservedKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import make_copy
from nvflare.app_common.abstract.fl_model import FLModel
from nvflare.app_common.utils.fl_model_utils import FLModelUtils

from fl_contract import secure_aggregation_messages as messages
from server_app.privacy.addressed_ciphertexts import AddressedCiphertexts

SITES = ["site-1", "site-2", "site-3"]


def _to(site: str) -> FLContext:
    peer = FLContext()
    peer.set_prop(ReservedKey.IDENTITY_NAME, site, private=False, sticky=False)
    context = FLContext()
    context.set_peer_context(peer)
    return context


def _relay() -> FLModel:
    pairs = {f"{s}/{r}": np.full(92, i, dtype=np.uint8) for i, (s, r) in enumerate(
        (s, r) for s in SITES for r in SITES if s != r)}
    return FLModel(params=pairs, meta={messages.SESSION: "s1", messages.SITES: SITES})


def test_each_site_gets_only_its_own_ciphertexts_and_the_shared_data_is_untouched():
    relayed = FLModelUtils.to_shareable(_relay())
    for site in SITES:
        sent = FLModelUtils.from_shareable(AddressedCiphertexts().process(make_copy(relayed), _to(site)))
        assert sorted(sent.params) == sorted(f"{other}/{site}" for other in SITES if other != site)
        assert messages.addressed_to(site, sent.params) == messages.addressed_to(site, _relay().params)
        assert sent.meta[messages.SITES] == SITES
    assert len(FLModelUtils.from_shareable(relayed).params) == 6


def test_a_task_without_the_relay_passes_unchanged():
    model = FLModelUtils.to_shareable(FLModel(params={"weight": np.ones(2)}, meta={messages.SESSION: "s1"}))
    assert AddressedCiphertexts().process(model, _to("site-1")) is model
