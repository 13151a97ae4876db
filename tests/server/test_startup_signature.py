"""The server's own signature through FLARE's start-up window (server_app.startup_signature), played on FLARE 2.9's
own FederatedServer methods, CredKeeper and the admin client's check of the server's messages, with a provisioned
server certificate and key.

A FLARE upgrade that signs differently, or no longer keeps an unsigned signature, fails here by name. The whole
restart path runs on the provisioned federation in tests/federation/test_faults.py (the server killed and started
again without waiting for it, the sites and `fl-job submit` reconnecting through the window).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from nvflare.apis.fl_constant import CellMessageAuthHeaderKey, FLContextKey, SecureTrainConst
from nvflare.apis.fl_context import FLContextManager
from nvflare.fuel.f3.cellnet.registry import Callback, Registry
from nvflare.fuel.f3.message import Message
from nvflare.private.fed.app.deployer.server_deployer import ServerDeployer
from nvflare.private.fed.app.server import server_train
from nvflare.private.fed.authenticator import validate_auth_headers
from nvflare.private.fed.server.cred_keeper import CredKeeper
from nvflare.private.fed.server.fed_server import FederatedServer
from nvflare.private.fed.utils.identity_utils import TokenVerifier, load_crt

from federation_tools.loopback import free_port
from provisioning.provision import customise, load_template, provision
from server_app.startup_signature import UNSIGNED, WINDOW_HIT, resign_own_messages_once_identity_loaded

LOG = logging.getLogger(__name__)


class _Engine:
    """What FederatedServer's signing reads of its engine: contexts sharing sticky properties, as FLARE's do."""

    def __init__(self) -> None:
        self.contexts = FLContextManager(identity_name="server")

    def new_context(self):  # noqa: ANN201 - FLARE's FLContext
        return self.contexts.new_context()

    def load_identity(self, startup: Path) -> None:
        """What `server_train` does once its admin server has started: the configuration goes into the context."""
        config = [{SecureTrainConst.SSL_CERT: str(startup / "server.crt"),
                   SecureTrainConst.PRIVATE_KEY: str(startup / "server.key"),
                   SecureTrainConst.SSL_ROOT_CERT: str(startup / "rootCA.pem")}]
        with self.new_context() as fl_ctx:
            fl_ctx.set_prop(FLContextKey.SERVER_CONFIG, config, private=True, sticky=True)


@pytest.fixture(scope="module")
def server_startup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    federation = provision(customise(load_template(None), name="signing", sites=["site-1"], port=free_port()),
                           tmp_path_factory.mktemp("kits"))
    return federation.kit(federation.server) / "startup"


class _Cell:
    """What the filter installs into: FLARE's own filter registry, applied in order as its CoreCell does."""

    def __init__(self) -> None:
        self.core_cell = self
        self.replies, self.requests = Registry(), Registry()

    def add_outgoing_reply_filter(self, channel: str, topic: str, cb: Callable[[Message], None]) -> None:
        self.replies.append(channel, topic, Callback(cb, (), {}))

    def add_outgoing_request_filter(self, channel: str, topic: str, cb: Callable[[Message], None]) -> None:
        self.requests.append(channel, topic, Callback(cb, (), {}))


def _flare_server() -> FederatedServer:
    """FLARE's FederatedServer with only what its signing of its own messages uses (its __init__ starts threads),
    and FLARE's own auth filter on its outgoing messages, as `FederatedServer.deploy` adds it."""
    server = FederatedServer.__new__(FederatedServer)
    server.engine = _Engine()
    server.cred_keeper = CredKeeper()
    server.logger = LOG
    server.my_own_auth_client_name = server.my_own_token = "server"
    server.my_own_token_signature = None
    server.cell = _Cell()
    server.cell.add_outgoing_reply_filter("*", "*", server._add_auth_headers)
    server.cell.add_outgoing_request_filter("*", "*", server._add_auth_headers)
    return server


def _sent(server: FederatedServer) -> Message:
    """A reply the server sends (to a site's heartbeat), through its cell's outgoing filters in order."""
    message = Message(headers={})
    for f in server.cell.replies.find("hb", "hb"):
        f.cb(message, *f.args, **f.kwargs)
    return message


def _admin_refuses(message: Message, startup: Path) -> str | None:
    """What an admin client's incoming filter (FLARE's `validate_auth_headers` with the server's certificate)
    answers: None when it accepts the message, else its error."""
    reply = validate_auth_headers(message, TokenVerifier(load_crt(str(startup / "server.crt"))), LOG)
    return None if reply is None else str(reply.get_header("error") or reply.headers)


def test_flare_keeps_the_unsigned_signature_of_a_message_sent_in_its_start_up_window(server_startup):
    server = _flare_server()
    assert _admin_refuses(_sent(server), server_startup)  # before the identity: unsigned
    server.engine.load_identity(server_startup)
    after = _sent(server)
    assert server.my_own_token_signature == UNSIGNED
    assert "invalid auth token signature" in str(_admin_refuses(after, server_startup))


def test_the_first_message_after_the_identity_is_loaded_is_signed_and_admins_accept_it(server_startup):
    server = _flare_server()
    said: list[str] = []
    resign_own_messages_once_identity_loaded(server, said.append)  # at SYSTEM_START, before the window's traffic
    assert _admin_refuses(_sent(server), server_startup)
    _sent(server)
    assert server.my_own_token_signature is None and said == [WINDOW_HIT]  # said once
    server.engine.load_identity(server_startup)
    assert _admin_refuses(_sent(server), server_startup) is None
    assert _admin_refuses(_sent(server), server_startup) is None  # kept, and valid
    assert server.my_own_token_signature not in (None, UNSIGNED)


def test_a_signature_flare_kept_before_the_identity_arrived_is_replaced_on_the_next_message(server_startup):
    """FLARE signed (and kept "NA") before the configuration arrived, whether before the filter was installed or
    in the same moment as the configuration: the next message is signed again."""
    server = _flare_server()
    server._add_auth_headers(Message(headers={}))  # FLARE alone: the cell answered before SYSTEM_START
    assert server.my_own_token_signature == UNSIGNED
    said: list[str] = []
    resign_own_messages_once_identity_loaded(server, said.append)
    server.engine.load_identity(server_startup)
    assert _admin_refuses(_sent(server), server_startup) is None and said == [WINDOW_HIT]
    assert server.my_own_token_signature not in (None, UNSIGNED)


def test_messages_of_others_pass_as_flare_made_them(server_startup):
    server = _flare_server()
    resign_own_messages_once_identity_loaded(server, LOG.info)
    relayed = Message(headers={CellMessageAuthHeaderKey.CLIENT_NAME: "site-1", CellMessageAuthHeaderKey.TOKEN: "t",
                               CellMessageAuthHeaderKey.TOKEN_SIGNATURE: UNSIGNED})
    for f in server.cell.requests.find("any", "any")[1:]:  # ours only: FLARE's would put the server's own headers
        f.cb(relayed)
    assert relayed.get_header(CellMessageAuthHeaderKey.TOKEN_SIGNATURE) == UNSIGNED
    assert server.my_own_token_signature is None


def test_flares_start_up_has_the_window_and_the_fix_runs_inside_it():
    """The cell listens (`deployer.deploy`) and the admin server starts before the configuration is in the context;
    SYSTEM_START, where JobRecovery installs the fix, comes after the cell started; registration is safe in the
    window because the identity challenge needs secure mode, set after the configuration."""
    main = inspect.getsource(server_train.main)
    assert main.index("deployer.deploy(args)") < main.index("admin_server.start()") \
        < main.index("key=FLContextKey.SERVER_CONFIG") < main.index("key=FLContextKey.SECURE_MODE")
    deploy = inspect.getsource(ServerDeployer.deploy)
    assert deploy.index("services.deploy(") < deploy.index("fire_event(EventType.SYSTEM_START")
    assert "if not self.my_own_token_signature:" in inspect.getsource(FederatedServer._add_auth_headers)
    deploy_cell = inspect.getsource(FederatedServer.deploy)
    assert 'add_outgoing_reply_filter(channel="*", topic="*", cb=self._add_auth_headers)' in deploy_cell
    challenge = inspect.getsource(FederatedServer.client_challenge)
    assert challenge.index("if not secure_mode:") < challenge.index("id_asserter = self._get_id_asserter()")
