"""A message the server sends in FLARE's start-up window no longer locks every admin out of it until its next restart.

FLARE 2.9's server signs the auth headers of its own messages (`FederatedServer._add_auth_headers`) with a signature
it computes once, on its first outgoing message, and keeps (`my_own_token_signature`). Its signing identity comes
from the server configuration in its context (`CredKeeper.get_id_asserter`), which `server_train` puts there only
after the server's cell is listening and its admin server has started. A message the server sends in between (the
answer to a site's heartbeat or identity challenge: after a server restart the sites are knocking as it starts)
is signed "NA", and "NA" is kept. Sites do not check the server's signature, so the federation looks healthy, but
every admin client does: from then on every admin session (the console, the FLARE API, `fl-job submit` following a
job through the restart) logs in and then fails every command with "invalid auth token signature", until the server
is restarted again. Registration itself is safe in that window: a site's or admin's identity challenge is refused
until the server's secure mode is in its context, which is set after its configuration.

Installed by `server_app.recovery.JobRecovery` at start-up (`SYSTEM_START`, after the cell started and before the
configuration is in the context): a signature computed before the server's identity is loaded is used for that one
message and not kept, so the first message after it is signed properly; one already kept by then is dropped.
tests/server/test_startup_signature.py plays FLARE's own methods through the window and fails when FLARE changes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nvflare.apis.fl_constant import FLContextKey

UNSIGNED = "NA"
"""What FLARE's `FederatedServer.sign_auth_token` returns while the server has no signing identity."""


def identity_loaded(server: Any) -> bool:
    """Whether `server_train` has put the server's configuration (its certificate and key) into its context."""
    with server.engine.new_context() as fl_ctx:
        return fl_ctx.get_prop(FLContextKey.SERVER_CONFIG) is not None


WINDOW_HIT = ("the server answered a message before its signing identity was loaded (FLARE's start-up window); "
              "that answer went unsigned and the server's own signature is made once the identity is loaded, so "
              "admin sessions are not refused")


def sign_own_messages_once_identity_loaded(server: Any, log: Callable[[str], None]) -> None:
    """Make `server` (FLARE's FederatedServer) keep no signature of its own made before its identity was loaded;
    `log` says so (once) when that happened."""
    sign = server.sign_auth_token
    said = False

    def unsigned_in_window() -> None:
        nonlocal said
        if not said:
            said = True
            log(WINDOW_HIT)

    def sign_or_wait(client_name: str, token: str) -> str | None:
        signature: str = sign(client_name, token)
        own = (client_name, token) == (server.my_own_auth_client_name, server.my_own_token)
        if own and signature == UNSIGNED and not identity_loaded(server):
            unsigned_in_window()
            return None  # this message goes out unsigned ("NA"), and the next one is signed again
        return signature

    server.sign_auth_token = sign_or_wait
    if server.my_own_token_signature == UNSIGNED:
        server.my_own_token_signature = None
        unsigned_in_window()
