"""A message the server sends in FLARE's start-up window no longer locks every admin out of it until its next restart.

FLARE 2.9's server signs the auth headers of its own messages (`FederatedServer._add_auth_headers`, an outgoing
filter of its cell) with a signature it computes once, on its first outgoing message, and keeps
(`my_own_token_signature`). Its signing identity comes from the server configuration in its context
(`CredKeeper.get_id_asserter`), which `server_train` puts there only after the server's cell is listening and its
admin server has started. A message the server sends in between (the answer to a site's heartbeat or identity
challenge: after a server restart the sites are knocking as it starts) is signed "NA", and "NA" is kept. Sites do
not check the server's signature, so the federation looks healthy, but every admin client does: from then on every
admin login (the console, the FLARE API, `fl-job submit` following a job through the restart) fails, the admin
client logging "invalid auth token signature", until the server is restarted again. Registration itself is safe in
that window: a site's or admin's identity challenge is refused until the server's secure mode is in its context,
which is set after its configuration.

Installed by `server_app.recovery.JobRecovery` at start-up (`SYSTEM_START`, after the cell started and before the
configuration is in the context): an outgoing filter after FLARE's own. A message of the server's own that leaves
signed "NA" is signed again once the identity is loaded, and the signature FLARE keeps is replaced; before that it
leaves unsigned and nothing is kept. Checking each message as it leaves, not the moment FLARE signs, leaves no race
between FLARE signing and the configuration arriving.
tests/server/test_startup_signature.py plays FLARE's own methods through the window and fails when FLARE changes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nvflare.apis.fl_constant import CellMessageAuthHeaderKey
from nvflare.fuel.f3.message import Message

UNSIGNED = "NA"
"""What FLARE's `FederatedServer.sign_auth_token` returns, and its auth headers carry, without a signing identity."""

WINDOW_HIT = ("the server sent a message before its signing identity was loaded (FLARE's start-up window); its "
              "messages are signed again once the identity is loaded, so admin sessions are not refused")


def resign_own_messages_once_identity_loaded(server: Any, log: Callable[[str], None]) -> None:
    """Add the filter the module describes to `server`'s (FLARE's FederatedServer) cell; `log` says (once) that the
    window was hit."""
    said = False

    def resign(message: Message) -> None:
        nonlocal said
        if (message.get_header(CellMessageAuthHeaderKey.TOKEN_SIGNATURE) != UNSIGNED
                or message.get_header(CellMessageAuthHeaderKey.CLIENT_NAME) != server.my_own_auth_client_name
                or message.get_header(CellMessageAuthHeaderKey.TOKEN) != server.my_own_token):
            return
        if not said:
            said = True
            log(WINDOW_HIT)
        signature = server.sign_auth_token(server.my_own_auth_client_name, server.my_own_token)
        if signature == UNSIGNED:  # not loaded yet: this one leaves unsigned, and FLARE signs the next one afresh
            server.my_own_token_signature = None
            return
        server.my_own_token_signature = signature
        message.set_header(CellMessageAuthHeaderKey.TOKEN_SIGNATURE, signature)

    core_cell = server.cell.core_cell
    core_cell.add_outgoing_reply_filter(channel="*", topic="*", cb=resign)
    core_cell.add_outgoing_request_filter(channel="*", topic="*", cb=resign)
