"""`site-agent start` on a real provisioned federation: a kit the server refuses ends within seconds naming why; a
good kit registers, a crashed client ends the command non-zero, and starting again rejoins.

FLARE's own start path runs such a refused client on silently forever
(docs/site-it-guide.md#5-start-the-site-and-when-it-cannot-join).
Every process is stopped by its own PID: the `site-agent start` processes the tests start, and their descendants.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from support import ADMIN, free_port

from federation_tools.loopback import LoopbackFederation
from provisioning.provision import Federation, customise, load_template, provision
from site_agent.kit.preflight import check_server
from site_agent.kit.start import EXIT_REFUSED, EXIT_UNAVAILABLE, LOG_NAME
from site_agent.kit.startup import SiteKit

pytestmark = pytest.mark.federation

SITE = "site-1"
START = [sys.executable, "-m", "site_agent.cli", "start"]


@dataclass(frozen=True)
class StartFederation:
    federation: Federation
    loopback: LoopbackFederation

    def connected(self) -> set[str]:
        session = self.loopback.session(ADMIN)
        try:
            return {c.name for c in session.get_connected_client_list()}
        finally:
            session.close()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartFederation]:
    """A server of its own and one site kit that nothing has started: the tests start (and kill) that site."""
    project = customise(load_template(None), name="start-federation", sites=[SITE], port=free_port(),
                        admins={ADMIN: "project_admin"})
    federation = provision(project, tmp_path_factory.mktemp("start"))
    loopback = LoopbackFederation(federation)
    try:
        loopback.start_server()
        kit = SiteKit.open(federation.kit(SITE))
        deadline = time.monotonic() + 60
        while check_server(kit).status != "OK" and time.monotonic() < deadline:
            time.sleep(1)
        yield StartFederation(federation, loopback)
    finally:
        loopback.stop()  # by PID at once: no site of this federation runs under the loopback launcher


def _copy_kit(running: StartFederation, dest: Path) -> Path:
    shutil.copytree(running.federation.kit(SITE), dest, ignore=shutil.ignore_patterns("*.log", "*.txt"))
    return dest


def _sign_site_certificate(
    running: StartFederation, kit: Path, not_before: dt.datetime, not_after: dt.datetime
) -> None:
    """A new key and certificate for the kit's site, signed by the federation's own root CA with these dates."""
    state = json.loads((running.federation.kits_dir.parent / "state" / "cert.json").read_text())
    root_key = serialization.load_pem_private_key(state["root_pri_key"].encode(), password=None)
    assert isinstance(root_key, rsa.RSAPrivateKey)
    root = x509.load_pem_x509_certificate(state["root_cert"].encode())
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "site_1"),
                         x509.NameAttribute(NameOID.COMMON_NAME, SITE)])
    certificate = (x509.CertificateBuilder().subject_name(subject).issuer_name(root.subject)
                   .public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after)
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName(SITE)]), critical=False)
                   .sign(root_key, hashes.SHA256()))
    (kit / "startup" / "client.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (kit / "startup" / "client.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                                   serialization.PrivateFormat.PKCS8,
                                                                   serialization.NoEncryption()))


def _another_ca(running: StartFederation, kit: Path) -> None:
    project = customise(load_template(None), name="other-federation", sites=[SITE], port=free_port())
    other = provision(project, kit.parent / "other")
    for name in ("client.crt", "client.key"):
        shutil.copy(other.kit(SITE) / "startup" / name, kit / "startup" / name)


def _expired(running: StartFederation, kit: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    _sign_site_certificate(running, kit, now - dt.timedelta(days=400), now - dt.timedelta(days=1))


def _not_yet_valid(running: StartFederation, kit: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    _sign_site_certificate(running, kit, now + dt.timedelta(days=2), now + dt.timedelta(days=300))


def _unknown_site_name(running: StartFederation, kit: Path) -> None:
    """The kit names a site its certificate does not carry (FLARE's server refuses it at registration)."""
    config_path = kit / "startup" / "fed_client.json"
    config = json.loads(config_path.read_text())
    config["client"]["fqsn"] = "site-9"
    config_path.write_text(json.dumps(config))


BAD_KITS = {
    "another CA": (_another_ca, "not signed by this kit's root CA"),
    "expired": (_expired, "certificate expired on"),
    "not yet valid": (_not_yet_valid, "certificate is not valid before"),
    "unknown site name": (_unknown_site_name, "certificate is for site 'site-1' but the kit's startup/fed_client.json "
                                              "names the site 'site-9'"),
}


def _bad_kit(running: StartFederation, tmp_path: Path, kind: str) -> Path:
    kit = _copy_kit(running, tmp_path / "kit")
    BAD_KITS[kind][0](running, kit)
    return kit


@pytest.mark.parametrize("kind", list(BAD_KITS))
def test_a_refused_kit_stops_at_once_naming_the_reason(running, tmp_path, kind):
    kit = _bad_kit(running, tmp_path, kind)

    done = subprocess.run([*START, "--kit", str(kit), "--timeout", "10"], capture_output=True, text=True, timeout=120)

    assert done.returncode == EXIT_REFUSED, done.stderr
    # at once: the preflight refused it, so no FLARE client was started and nothing waited for a registration
    assert "started the FLARE client" not in done.stderr, done.stderr
    reason = BAD_KITS[kind][1]
    assert reason in done.stderr and "did not start the FLARE client" in done.stderr
    log = (kit / LOG_NAME).read_text()
    assert reason in log and "what to do: ask the federation lead" in log


@pytest.mark.parametrize("kind", ["another CA", "unknown site name"])
def test_the_registration_watch_stops_a_client_the_server_refused(running, tmp_path, kind):
    """Without the preflight (as if the site's own checks passed), the watch alone names the refusal: the server
    refuses these two at different points (TLS after the handshake; registration)."""
    kit = _bad_kit(running, tmp_path, kind)
    program = ("import sys\nfrom site_agent.kit.start import start_site\n"
               f"sys.exit(start_site({str(kit)!r}, 10, preflight=False))")

    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)

    assert done.returncode == EXIT_REFUSED, done.stderr
    # the client was started and the watch, not a preflight, stopped it: another CA's client runs on silently until
    # the registration timeout, an unknown name (not in the server's participants list) is refused by the server
    assert "started the FLARE client" in done.stderr and "stopped the FLARE client (pid " in done.stderr, done.stderr
    assert BAD_KITS[kind][1] in done.stderr
    client_pid = int(done.stderr.split("stopped the FLARE client (pid ")[1].split(")")[0])
    assert not psutil.pid_exists(client_pid)
    assert SiteKit.open(kit).site_name not in running.connected()


def test_a_client_that_cannot_start_is_named_with_its_last_lines(running, tmp_path):
    kit = _copy_kit(running, tmp_path / "kit")
    resources = json.loads((kit / "local" / "resources.json").read_text())
    resources["components"].append({"id": "broken", "path": "site_agent.no_such_module.Component", "args": {}})
    (kit / "local" / "resources.json").write_text(json.dumps(resources))
    program = ("import sys\nfrom site_agent.kit.start import start_site\n"
               f"sys.exit(start_site({str(kit)!r}, 30, preflight=False))")

    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)

    assert done.returncode == EXIT_UNAVAILABLE, done.stderr  # not a refusal: the service manager tries again
    assert "exited with code" in done.stderr and "before registering; its last lines:" in done.stderr
    assert "site_agent.no_such_module.Component" in done.stderr


def test_the_check_proves_that_the_server_accepts_the_certificate(running, tmp_path):
    refused = check_server(SiteKit.open(_bad_kit(running, tmp_path, "another CA")))
    accepted = check_server(SiteKit.open(running.federation.kit(SITE)))

    assert refused.status == "FAIL" and "refused this site's certificate" in refused.detail
    assert "ask the federation lead for this site's current kit" in refused.fix
    assert accepted.status == "OK" and "accepted this site's certificate (answered HTTP/1.1" in accepted.detail


def _tree(process: subprocess.Popen) -> list[psutil.Process]:
    try:
        root = psutil.Process(process.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _stop_tree(process: subprocess.Popen) -> None:
    """Stop a `site-agent start` the test started, and everything it started, by PID."""
    tree = _tree(process)
    for proc in tree:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(tree, timeout=20)
    for proc in alive:
        proc.kill()
    process.wait(timeout=10)


def _flare_client(process: subprocess.Popen) -> psutil.Process:
    return next(p for p in _tree(process)[1:] if "client_train" in " ".join(p.cmdline()))


def _wait_ready(listener: socket.socket, process: subprocess.Popen) -> None:
    """Wait for systemd's READY=1 from `site-agent start` (sent once the server registered the site)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if b"READY=1" in listener.recv(4096):
                return
        except TimeoutError:
            assert process.poll() is None, f"site-agent start exited with {process.returncode}"
    raise AssertionError("the site did not register within 120 s")


def _status_json(output: str) -> dict:
    """The status page `site-agent start --status-port` logged the link of, read with its token."""
    found = re.search(r"status page at (http://127\.0\.0\.1:\d+)/\?token=(\S+)", output)
    assert found, output
    request = urllib.request.Request(found.group(1) + "/status.json",
                                     headers={"Authorization": f"Bearer {found.group(2)}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return dict(json.loads(answer.read()))


def test_a_good_kit_registers_a_crashed_client_ends_start_and_a_new_start_rejoins(running, tmp_path):
    kit = running.federation.kit(SITE)
    notify_path = str(tmp_path / "notify")
    env = {**os.environ, "NOTIFY_SOCKET": notify_path}
    command = [*START, "--kit", str(kit), "--timeout", "30"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(notify_path)
        listener.settimeout(1.0)
        first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "first.err").open("w"))
        second = None
        try:
            _wait_ready(listener, first)
            assert SITE in running.connected()
            crashed = _flare_client(first)

            crashed.kill()  # the client crashes: `site-agent start` must fail so that the service manager restarts it
            assert first.wait(timeout=30) == 128 + signal.SIGKILL
            assert not crashed.is_running()

            second = subprocess.Popen([*command, "--status-port", "0"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=(tmp_path / "second.err").open("w"))
            _wait_ready(listener, second)
            assert SITE in running.connected()
            client = _flare_client(second)
            status = _status_json((tmp_path / "second.err").read_text())  # the page the service unit's switch serves
            assert status["connection"]["client_pid"] == client.pid and status["connection"]["server_status"] == "OK"
            assert status["connection"]["registered_at"]

            second.send_signal(signal.SIGTERM)  # systemctl stop
            assert second.wait(timeout=40) == 0
            assert not client.is_running()
        finally:
            for process in (first, second):
                if process is not None:
                    _stop_tree(process)
    log = (kit / LOG_NAME).read_text()
    assert "the FLARE client (pid" in log and "ended with code -9; exiting with 137" in log
    assert log.count(f"{SITE} registered with the server") == 2
    assert "SIGTERM: stopping the FLARE client" in log
