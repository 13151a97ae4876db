"""`site-agent check`'s link row when the link cannot be measured: another transport, no server, a server (or a
proxy in front of it) that cuts the exchange short. The measured rows are tested on the provisioned federation
(tests/federation/test_link_check.py)."""

from __future__ import annotations

import json
import socket
import ssl
import threading

from federation_tools.loopback import free_port
from site_agent.kit.preflight import FAIL, WARN, check_link
from site_agent.kit.startup import SiteKit


def _set_target(kit, port=None, scheme=None):
    path = kit / "startup" / "fed_client.json"
    config = json.loads(path.read_text())
    service = config["servers"][0]["service"]
    if port is not None:
        service["target"] = f"localhost:{port}"
    if scheme is not None:
        service["scheme"] = scheme
    path.write_text(json.dumps(config))


def test_a_kit_on_another_transport_is_not_measured_and_says_so(kit):
    _set_target(kit, scheme="grpc")

    row = check_link(SiteKit.open(kit))

    assert row.status == WARN
    assert "not measured: FLARE's 'grpc' transport gives no exchange to time" in row.detail
    assert "http scheme" in row.fix


def test_no_server_fails_the_link_row_as_transient(kit):
    port = free_port()
    _set_target(kit, port=port)

    row = check_link(SiteKit.open(kit))

    assert row.status == FAIL and row.transient
    assert f"localhost:{port}: the link check failed" in row.detail and "refused" in row.detail.lower()


def test_a_server_that_cuts_the_exchange_short_fails_naming_it(provisioned, kit):
    """A TLS endpoint with the federation's server certificate (as a proxy holding it would be) that answers the
    first request and then closes the connection: the row fails, saying the server ended the exchange."""
    startup = provisioned.kit(provisioned.server) / "startup"
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(startup / "rootCA.pem"))
    context.load_cert_chain(str(startup / "server.crt"), str(startup / "server.key"))
    context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    _set_target(kit, port=listener.getsockname()[1])

    def answer_once() -> None:
        connection, _ = listener.accept()
        with context.wrap_socket(connection, server_side=True) as tls:
            tls.recv(4096)
            tls.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    server = threading.Thread(target=answer_once, daemon=True)
    server.start()
    try:
        row = check_link(SiteKit.open(kit))
    finally:
        server.join(timeout=10)
        listener.close()

    assert row.status == FAIL
    assert "the connection during the link check" in row.detail
    assert "see the server row" in row.fix
