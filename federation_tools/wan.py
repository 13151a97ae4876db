"""Sites behind an emulated WAN link: each in a network namespace of its own, the server in the root namespace.

The link is a veth pair (site namespace <-> root namespace) whose two ends each carry a `tc tbf` token bucket, so the
rate holds both ways; an outage sets the site's end down (packets are dropped, TCP connections survive as on a real
outage). This kernel has no `netem`, so delay and loss are not emulated here.

A loopback federation's server is named `localhost` and listens on 127.0.0.1, which a namespace cannot reach, and a
site's own processes talk to each other on the namespace's 127.0.0.1, which must stay theirs. So two relays carry
the server's port across the link, bytes unchanged: one listening on the namespace's 127.0.0.1:PORT (its socket made
by a thread that joined the namespace, setns(2)) connects across the veth to the root end, where the other passes it
to the server's 127.0.0.1:PORT. The site's kit, its mutual TLS and FLARE's own transport are untouched; both relays
run in the caller's process. Needs root and iproute2 (`ip`, `tc`); `namespaces_unavailable()` says why not.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

_NETNS_RUN = Path("/run/netns")
_CLONE_NEWNET = 0x40000000
_counter = itertools.count()


class WanUnavailable(RuntimeError):
    """Network namespaces or `tc tbf` cannot be made on this machine; the message says what is missing."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def _tbf(namespace: str | None, device: str, mbit: float) -> None:
    """A token bucket on the device's egress: `mbit` Mbit/s, a burst of a few MTUs, up to 1 s of queue."""
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    burst = max(16_000, int(mbit * 1e6 / 8 / 250))  # at least rate / HZ (250 here) or tbf cannot reach the rate
    subprocess.run([*prefix, "tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate", f"{mbit}mbit",
                    "burst", str(burst), "latency", "1000ms"], capture_output=True, text=True, check=True, timeout=10)


def namespaces_unavailable() -> str | None:
    """Why sites cannot be put behind emulated links here (None: they can): root, `ip`, `tc` and a namespace with
    a veth pair carrying tbf are needed."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (iproute2)"
    try:
        with EmulatedLink(mbit=100.0, relay_ports=()):
            return None
    except (WanUnavailable, subprocess.CalledProcessError, OSError) as exc:
        return f"cannot make a namespace behind a tbf link: {exc}"


@dataclass
class EmulatedLink:
    """One site's namespace behind a `mbit` Mbit/s link (0: unlimited); `relay_ports` are the server's ports on
    127.0.0.1 that the namespace reaches as localhost:PORT. Use as a context manager; `command` prefixes a command
    line to run it inside."""

    mbit: float = 0.0
    relay_ports: tuple[int, ...] = ()
    name: str = field(default_factory=lambda: f"hfl{os.getpid() % 100000}x{next(_counter)}")
    _relays: list[_Relay] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        index = next(_counter) % 250 + 1
        subnet = os.getpid() % 200 + 20
        self.root_address, self.site_address = f"10.{subnet}.{index}.1", f"10.{subnet}.{index}.2"
        self.root_device, self.site_device = f"{self.name}r", f"{self.name}s"

    def command(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def set_rate(self, mbit: float) -> None:
        """Change the link's rate both ways (0: unlimited)."""
        self.mbit = mbit
        for namespace, device in ((None, self.root_device), (self.name, self.site_device)):
            if mbit:
                _tbf(namespace, device, mbit)
            else:
                prefix = ["ip", "netns", "exec", namespace] if namespace else []
                subprocess.run([*prefix, "tc", "qdisc", "del", "dev", device, "root"], capture_output=True,
                               timeout=10)

    @contextmanager
    def down(self) -> Iterator[None]:
        """The link down for the duration (the site's end of the veth set down), then up again."""
        _ip("-n", self.name, "link", "set", self.site_device, "down")
        try:
            yield
        finally:
            _ip("-n", self.name, "link", "set", self.site_device, "up")
            _ip("-n", self.name, "route", "replace", "default", "via", self.root_address)

    def __enter__(self) -> EmulatedLink:
        """Builds the namespace, veth pair, addresses, rate limit and relays in turn; any failure undoes what was built
        (__exit__), so a failed setup leaves no namespace or link behind on the host."""
        try:
            _ip("netns", "add", self.name)
        except subprocess.CalledProcessError as exc:
            raise WanUnavailable(f"ip netns add failed: {exc.stderr.strip()}") from exc
        try:
            _ip("link", "add", self.root_device, "type", "veth", "peer", "name", self.site_device)
            _ip("link", "set", self.site_device, "netns", self.name)
            _ip("addr", "add", f"{self.root_address}/30", "dev", self.root_device)
            _ip("link", "set", self.root_device, "up")
            _ip("-n", self.name, "addr", "add", f"{self.site_address}/30", "dev", self.site_device)
            _ip("-n", self.name, "link", "set", self.site_device, "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
            _ip("-n", self.name, "route", "add", "default", "via", self.root_address)
            if self.mbit:
                self.set_rate(self.mbit)
            for port in self.relay_ports:
                self._relays.append(_Relay((self.root_address, port), ("127.0.0.1", port)))
                self._relays.append(_Relay(("127.0.0.1", port), (self.root_address, port), namespace=self.name))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for relay in self._relays:
            relay.close()
        _ip("link", "del", self.root_device, check=False)  # removes its peer too
        _ip("netns", "del", self.name, check=False)


def _join_namespace(name: str) -> None:
    """Move the calling thread (only it) into the named network namespace: sockets it makes belong there."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open(_NETNS_RUN / name) as handle:
        if libc.setns(handle.fileno(), _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into network namespace {name} failed")


class _Relay:
    """Passes every TCP connection to `listen` on to `target`, bytes unchanged, both ways, one thread per direction.
    With `namespace`, the listening socket and every connection to `target` are made inside that namespace."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], namespace: str | None = None):
        self.listen, self.target, self.namespace = listen, target, namespace
        self.closed = False
        self.server: socket.socket | None = None
        ready = threading.Event()
        self.error: BaseException | None = None
        threading.Thread(target=self._run, args=(ready,), name=f"relay {listen}", daemon=True).start()
        ready.wait(10)
        if self.server is None:
            raise WanUnavailable(f"relay on {listen} ({namespace or 'root namespace'}) did not start: {self.error}")

    def _run(self, ready: threading.Event) -> None:
        """Runs in its own thread so that only it joins the site's namespace; a failure to listen is handed to __init__,
        a connection the target refuses is dropped, and each accepted one gets a pump per direction."""
        try:
            if self.namespace:
                _join_namespace(self.namespace)
            self.server = socket.create_server(self.listen)
        except BaseException as exc:  # reported by __init__
            self.error = exc
            return
        finally:
            ready.set()
        while not self.closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.closed = True
        if self.server is not None:
            self.server.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(1 << 16):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
