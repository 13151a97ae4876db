"""Sites behind an emulated WAN link: each in a network namespace of its own, the server in the root namespace.

A link is one of two kinds (`kind`):

- `tbf`: a veth pair (site namespace <-> root namespace) whose two ends each carry a `tc tbf` token bucket, so the
  rate holds both ways; an outage sets the site's end down (packets are dropped, TCP connections survive as on a
  real outage). Rate and outage only: this kernel has no `netem`, so no delay or loss.
- `emulator`: a pair of TUN devices (one in each namespace, point-to-point addresses) with the userspace emulator
  between them (link_emulator.py, a process of its own, stopped by PID on exit): delay and jitter,
  loss per direction, rate and outage (every packet dropped), all changeable while the link runs. It costs CPU per
  packet, the tbf link none.

A loopback federation's server is named `localhost` and listens on 127.0.0.1, which a namespace cannot reach, and a
site's own processes talk to each other on the namespace's 127.0.0.1, which must stay theirs. So two relays carry
the server's port across the link, bytes unchanged: one listening on the namespace's 127.0.0.1:PORT (its socket made
by a thread that joined the namespace, setns(2)) connects across the veth to the root end, where the other passes it
to the server's 127.0.0.1:PORT. The site's kit, its mutual TLS and FLARE's own transport are untouched; both relays
run in the caller's process. Needs root and iproute2 (`ip`, `tc`), and /dev/net/tun for the emulator;
`namespaces_unavailable(kind)` says why not.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.link_emulator import Conditions, Counters, LinkEmulator, join_namespace

LINK_KINDS = ("tbf", "emulator")
TUN_QUEUE = 10_000
"""Packets a TUN device holds for the emulator to read (at 1500 bytes, 120 ms of a 1 Gbit/s burst): the kernel
drops what does not fit, which would be loss nobody asked for."""
_counter = itertools.count()


class WanUnavailable(RuntimeError):
    """Network namespaces, `tc tbf` or the emulator's TUN devices cannot be made here, or a link kind cannot
    emulate what was asked; the message says what is missing."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def _tbf(namespace: str | None, device: str, mbit: float) -> None:
    """A token bucket on the device's egress: `mbit` Mbit/s, a burst of a few MTUs, up to 1 s of queue."""
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    burst = max(16_000, int(mbit * 1e6 / 8 / 250))  # at least rate / HZ (250 here) or tbf cannot reach the rate
    subprocess.run([*prefix, "tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate", f"{mbit}mbit",
                    "burst", str(burst), "latency", "1000ms"], capture_output=True, text=True, check=True, timeout=10)


def _free_addresses() -> tuple[str, str]:
    """A root and a site address in a 10.A.B.0/30 that no device of the root namespace uses yet: links made by
    other processes at the same time (a bench beside a test) must not answer for each other's sites."""
    used = {".".join(word.split("/")[0].split(".")[:3]) for word in _ip("-4", "-o", "addr", "show").stdout.split()
            if word.startswith("10.")}
    start = (os.getpid() * 251 + next(_counter)) % (200 * 250)
    for offset in range(200 * 250):
        subnet, index = divmod((start + offset) % (200 * 250), 250)
        prefix = f"10.{subnet + 20}.{index + 1}"
        if prefix not in used:
            return f"{prefix}.1", f"{prefix}.2"
    raise WanUnavailable("no free 10.x.y.0/30 left in the root namespace for another emulated link")


def namespaces_unavailable(kind: str = "tbf") -> str | None:
    """Why sites cannot be put behind emulated links of `kind` here (None: they can): root, `ip`, `tc` and a
    namespace with a veth pair carrying tbf (kind tbf) or a TUN pair with the emulator running (kind emulator)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (iproute2)"
    if kind == "emulator" and not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun: the link emulator needs TUN devices"
    try:
        with EmulatedLink(mbit=100.0, relay_ports=(), kind=kind):
            return None
    except (WanUnavailable, subprocess.CalledProcessError, OSError, RuntimeError) as exc:
        return f"cannot make a namespace behind a {kind} link: {exc}"


@dataclass
class EmulatedLink:
    """One site's namespace behind a `mbit` Mbit/s link (0: unlimited) of `kind` (module docstring); `relay_ports`
    are the server's ports on 127.0.0.1 that the namespace reaches as localhost:PORT. `delay_ms` (one way, so the
    round trip is twice it), `jitter_ms` and the losses (fractions, per direction) need kind `emulator`. Use as a
    context manager; `command` prefixes a command line to run it inside."""

    mbit: float = 0.0
    relay_ports: tuple[int, ...] = ()
    kind: str = "tbf"
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_to_site: float = 0.0
    loss_from_site: float = 0.0
    name: str = field(default_factory=lambda: f"hfl{os.getpid() % 100000}x{next(_counter)}")
    _relays: list[_Relay] = field(default_factory=list, init=False)
    _emulator: LinkEmulator | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.kind not in LINK_KINDS:
            raise WanUnavailable(f"unknown link kind {self.kind!r}; known: {', '.join(LINK_KINDS)}")
        self._check_kind(self.delay_ms, self.jitter_ms, self.loss_to_site, self.loss_from_site)
        self.root_address = self.site_address = ""  # chosen by __enter__, where no other link of the host has them
        self.root_device, self.site_device = f"{self.name}r", f"{self.name}s"

    def command(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def _check_kind(self, *delay_and_loss: float) -> None:
        if self.kind == "tbf" and any(delay_and_loss):
            raise WanUnavailable("a tbf link emulates rate and outage only (this kernel has no netem): "
                                 "use kind='emulator' for delay, jitter or loss")

    def conditions(self) -> Conditions:
        return Conditions(self.delay_ms, self.jitter_ms, self.loss_to_site, self.loss_from_site, self.mbit)

    def set_conditions(self, **update: Any) -> None:
        """Change any of Conditions' fields but `down` (use `down()`): delay_ms, jitter_ms, loss_to_site,
        loss_from_site, mbit."""
        new = self.conditions().changed(update)  # checks names and values
        self._check_kind(new.delay_ms, new.jitter_ms, new.loss_to_site, new.loss_from_site)
        self.delay_ms, self.jitter_ms = new.delay_ms, new.jitter_ms
        self.loss_to_site, self.loss_from_site = new.loss_to_site, new.loss_from_site
        if self._emulator is not None:
            self._emulator.set(**{k: v for k, v in update.items() if k != "mbit"})
        if "mbit" in update:
            self.set_rate(new.mbit)

    def counters(self) -> dict[str, Counters]:
        """The emulator's packet counters per direction (to_site, from_site); kind emulator only."""
        if self._emulator is None:
            raise WanUnavailable(f"link {self.name} is a {self.kind} link: only the emulator counts packets")
        return self._emulator.counters()

    def emulator_cpu_seconds(self) -> float:
        """CPU seconds the link's emulator process has used; kind emulator only."""
        if self._emulator is None:
            raise WanUnavailable(f"link {self.name} is a {self.kind} link: it has no emulator process")
        return self._emulator.cpu_seconds()

    def set_rate(self, mbit: float) -> None:
        """Change the link's rate both ways (0: unlimited)."""
        self.mbit = mbit
        if self._emulator is not None:
            self._emulator.set(mbit=mbit)
            return
        for namespace, device in ((None, self.root_device), (self.name, self.site_device)):
            if mbit:
                _tbf(namespace, device, mbit)
            else:
                prefix = ["ip", "netns", "exec", namespace] if namespace else []
                subprocess.run([*prefix, "tc", "qdisc", "del", "dev", device, "root"], capture_output=True,
                               timeout=10)

    @contextmanager
    def down(self) -> Iterator[None]:
        """The link down for the duration (tbf: the site's end of the veth set down; emulator: every packet dropped,
        both ways), then up again."""
        if self._emulator is not None:
            self._emulator.set(down=True)
            try:
                yield
            finally:
                self._emulator.set(down=False)
            return
        _ip("-n", self.name, "link", "set", self.site_device, "down")
        try:
            yield
        finally:
            _ip("-n", self.name, "link", "set", self.site_device, "up")
            _ip("-n", self.name, "route", "replace", "default", "via", self.root_address)

    def __enter__(self) -> EmulatedLink:
        """Builds the namespace, veth pair, addresses, rate limit and relays in turn; any failure undoes what was built
        (__exit__), so a failed setup leaves no namespace or link behind on the host."""
        self.root_address, self.site_address = _free_addresses()
        try:
            _ip("netns", "add", self.name)
        except subprocess.CalledProcessError as exc:
            raise WanUnavailable(f"ip netns add failed: {exc.stderr.strip()}") from exc
        try:
            if self.kind == "tbf":
                _ip("link", "add", self.root_device, "type", "veth", "peer", "name", self.site_device)
                _ip("link", "set", self.site_device, "netns", self.name)
                _ip("addr", "add", f"{self.root_address}/30", "dev", self.root_device)
                _ip("-n", self.name, "addr", "add", f"{self.site_address}/30", "dev", self.site_device)
            else:
                for device in (self.root_device, self.site_device):  # a queue of 10,000 packets (500 by default),
                    _ip("tuntap", "add", "dev", device, "mode", "tun")  # so that a burst waits for the emulator
                    _ip("link", "set", "dev", device, "txqueuelen", str(TUN_QUEUE))  # rather than being lost
                _ip("link", "set", self.site_device, "netns", self.name)
                _ip("addr", "add", self.root_address, "peer", self.site_address, "dev", self.root_device)
                _ip("-n", self.name, "addr", "add", self.site_address, "peer", self.root_address, "dev",
                    self.site_device)
            _ip("link", "set", self.root_device, "up")
            _ip("-n", self.name, "link", "set", self.site_device, "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
            _ip("-n", self.name, "route", "add", "default", "via", self.root_address)
            if self.kind == "emulator":
                self._quiet_ipv6()
                self._emulator = LinkEmulator(self.name, self.root_device, self.site_device, Conditions())
                self._wait_until_carrying()
                self._emulator.set(**{k: v for k, v in asdict(self.conditions()).items() if k != "down"})
            elif self.mbit:
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
        if self._emulator is not None:
            self._emulator.stop()
            self._emulator = None
        _ip("link", "del", self.root_device, check=False)  # a veth's peer goes with it
        _ip("-n", self.name, "link", "del", self.site_device, check=False)
        _ip("netns", "del", self.name, check=False)

    def _quiet_ipv6(self) -> None:
        """IPv6 off on the TUN pair (where the kernel has it): no router solicitations or MLD reports cross the
        emulator, so its counters count the traffic under test and nothing else."""
        setting = "/proc/sys/net/ipv6/conf/{}/disable_ipv6"
        if os.path.exists(setting.format(self.root_device)):
            Path(setting.format(self.root_device)).write_text("1")
            site_setting = setting.format(self.site_device)  # /proc/sys/net is the writing process's namespace's
            subprocess.run(["ip", "netns", "exec", self.name, "sh", "-c", f"echo 1 > {site_setting}"], check=True,
                           timeout=10)

    def _wait_until_carrying(self, timeout: float = 10.0) -> None:
        """Until a datagram has crossed the link each way, before the conditions are set. The first datagram on a
        fresh link never arrived in 2 of about 25 runs of the emulator's tests (not pinned down; likely the device's
        queue not yet activated after its carrier came up), so the link is handed over once it has carried one."""
        root = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        site = self.site_socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            root.bind((self.root_address, 0))
            site.bind((self.site_address, 0))
            deadline = time.monotonic() + timeout
            for sender, receiver in ((site, root), (root, site)):
                receiver.settimeout(0.05)
                while True:
                    sender.sendto(b"probe", receiver.getsockname())
                    try:
                        receiver.recvfrom(16)
                        break
                    except TimeoutError:
                        if time.monotonic() > deadline:
                            raise WanUnavailable(f"link {self.name} carried no probe in {timeout:.0f} s") from None
        finally:
            root.close()
            site.close()

    def site_socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket made inside the site's namespace (by a thread that joined it); usable from any thread."""
        made: list[socket.socket | BaseException] = []

        def make() -> None:
            try:
                join_namespace(self.name)
                made.append(socket.socket(family, kind))
            except BaseException as exc:  # handed to the caller
                made.append(exc)

        thread = threading.Thread(target=make, name=f"socket in {self.name}")
        thread.start()
        thread.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        return made[0]


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
                join_namespace(self.namespace)
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
