"""The userspace link emulator (tests/harness/link_emulator.py) does what it says, with real traffic between a site's
network namespace and the root namespace: the round trip takes twice the one-way delay, jitter keeps packet order,
loss drops a binomial fraction of many UDP datagrams in the lossy direction only, an outage drops everything, a
rate limit holds; the emulator process and the namespace are gone afterwards, also when the body fails. The bad
inputs (conditions, a tbf link asked for delay) are refused by name, and the skip says why where a link cannot be
made; those run anywhere."""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import psutil
import pytest
from harness import wan
from harness.link_emulator import Conditions
from harness.wan import EmulatedLink, WanUnavailable, namespaces_unavailable
from support import require

NO_LINK = namespaces_unavailable("emulator")
needs_link = pytest.mark.needs(NO_LINK, "an emulator link")


@pytest.fixture(scope="module")
def link() -> Iterator[EmulatedLink]:
    require(NO_LINK, "an emulator link")
    with EmulatedLink(kind="emulator") as made:
        yield made


class _Receiver:
    """A UDP socket on `address` (by default in the root namespace, on the link's root address): the sequence
    numbers it got, in order; with `echo`, each datagram goes back to its sender."""

    def __init__(self, link: EmulatedLink, echo: bool = False, in_site: bool = False):
        self.sock = link.site_socket(socket.AF_INET, socket.SOCK_DGRAM) if in_site else socket.socket(
            socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.sock.bind((link.site_address if in_site else link.root_address, 0))
        self.sock.settimeout(0.05)  # a closed socket does not wake a blocked recvfrom: poll `closed`
        self.address = self.sock.getsockname()
        self.got: list[int] = []
        self.echo, self.closed = echo, False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.closed:
            try:
                data, sender = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            self.got.append(int(data[:8]))
            if self.echo:
                self.sock.sendto(data, sender)

    def close(self) -> None:
        self.closed = True
        self.thread.join(5)
        self.sock.close()


def _send(sock: socket.socket, address: tuple[str, int], count: int, pause: float = 0.0) -> None:
    for number in range(count):
        sock.sendto(b"%08d" % number + b"." * 92, address)
        if pause:
            time.sleep(pause)


def _settle(receiver: _Receiver, quiet: float = 0.5) -> None:
    """Until nothing more has arrived for `quiet` s."""
    seen = -1
    while len(receiver.got) != seen:
        seen = len(receiver.got)
        time.sleep(quiet)


def _round_trips(link: EmulatedLink, count: int) -> list[float]:
    receiver = _Receiver(link, echo=True)
    client = link.site_socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.settimeout(5)
    try:
        times = []
        for number in range(count):
            start = time.monotonic()
            client.sendto(b"%08d" % number, receiver.address)
            client.recvfrom(64)
            times.append(time.monotonic() - start)
        return times
    finally:
        client.close()
        receiver.close()


@needs_link
def test_the_round_trip_takes_twice_the_one_way_delay(link):
    link.set_conditions(delay_ms=60, jitter_ms=0)
    try:
        times = _round_trips(link, 10)
    finally:
        link.set_conditions(delay_ms=0)
    assert min(times) >= 0.120, times  # never early: each way waits its 60 ms (its accuracy: bench/)
    after = _round_trips(link, 3)
    assert min(after) < 0.120, after  # the delay is gone once set back: a delayed trip can never be this quick


@needs_link
def test_jitter_spreads_the_delay_but_keeps_packet_order(link):
    link.set_conditions(delay_ms=40, jitter_ms=30)
    receiver = _Receiver(link)
    client = link.site_socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        times = _round_trips(link, 15)
        _send(client, receiver.address, 300, pause=0.0005)  # a packet every ~0.5 ms, far closer than the jitter
        _settle(receiver)
    finally:
        client.close()
        receiver.close()
        link.set_conditions(delay_ms=0, jitter_ms=0)
    assert min(times) >= 2 * (0.040 - 0.030), times
    assert max(times) - min(times) > 0.010, times  # two uniform +-30 ms draws per trip: 15 trips cannot all agree
    assert receiver.got == list(range(300))


@needs_link
def test_loss_drops_a_binomial_fraction_in_its_direction_only(link):
    loss, count = 0.1, 3000
    before = link.counters()
    link.set_conditions(loss_from_site=loss)
    receiver, in_site = _Receiver(link), _Receiver(link, in_site=True)
    client, server = link.site_socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET,
                                                                                         socket.SOCK_DGRAM)
    try:
        _send(client, receiver.address, count, pause=0.0001)  # site -> root: lossy
        _send(server, in_site.address, count, pause=0.0001)  # root -> site: not
        _settle(receiver)
        _settle(in_site)
    finally:
        for sock in (client, server):
            sock.close()
        receiver.close()
        in_site.close()
        link.set_conditions(loss_from_site=0.0)
    from_site, to_site = len(receiver.got), len(in_site.got)
    bound = 4.5 * math.sqrt(count * loss * (1 - loss))  # a false alarm about once in 150,000 runs
    assert abs((count - from_site) - count * loss) < bound, (from_site, bound)
    assert to_site == count
    after = link.counters()
    assert after["from_site"].dropped_loss - before["from_site"].dropped_loss == count - from_site
    assert after["to_site"].dropped_loss == before["to_site"].dropped_loss


@needs_link
def test_an_outage_drops_everything_until_the_link_is_back(link):
    receiver = _Receiver(link)
    client = link.site_socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        with link.down():
            _send(client, receiver.address, 50)
            time.sleep(0.3)
            during = list(receiver.got)
        _send(client, receiver.address, 50)
        _settle(receiver, 0.3)
    finally:
        client.close()
        receiver.close()
    assert during == [] and receiver.got == list(range(50))


@needs_link
def test_a_rate_limit_holds_a_tcp_transfer_to_it(link):
    mbit, size = 4.0, 400_000
    link.set_conditions(mbit=mbit)
    server = socket.create_server((link.root_address, 0))
    received = []
    sink = threading.Thread(target=lambda: received.append(_drain(server)), daemon=True)
    sink.start()
    client = link.site_socket()
    try:
        client.connect(server.getsockname())
        start = time.monotonic()
        client.sendall(b"x" * size)
        client.shutdown(socket.SHUT_WR)
        sink.join(30)
        elapsed = time.monotonic() - start
    finally:
        client.close()
        server.close()
        link.set_conditions(mbit=0)
    assert received == [size]
    assert elapsed >= 0.95 * size * 8 / (mbit * 1e6), elapsed  # cannot beat the rate (headers only add to it)


def _drain(server: socket.socket) -> int:
    connection, _ = server.accept()
    with connection:
        total = 0
        while data := connection.recv(1 << 16):
            total += len(data)
    return total


@needs_link
def test_the_emulator_process_and_namespace_are_gone_after_a_failure():
    with pytest.raises(RuntimeError, match="the body failed"):
        with EmulatedLink(kind="emulator", delay_ms=10) as made:
            emulator = made._emulator
            assert emulator is not None and psutil.pid_exists(emulator.pid)
            raise RuntimeError("the body failed")
    assert emulator.process.poll() is not None
    assert made.name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert made.root_device not in subprocess.run(["ip", "link", "show"], capture_output=True, text=True).stdout


@needs_link
def test_an_emulator_that_died_is_named_and_its_link_still_removed():
    with EmulatedLink(kind="emulator") as made:
        emulator = made._emulator
        assert emulator is not None
        os.kill(emulator.pid, signal.SIGKILL)
        emulator.process.wait(10)
        with pytest.raises(RuntimeError, match=rf"link emulator \(pid {emulator.pid}\) has exited with status -9"):
            made.set_conditions(delay_ms=5.0)
    assert made.name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.mark.parametrize(("update", "message"), [
    ({"loss_to_site": 1.5}, "loss_to_site=1.5: a loss is a fraction in"),
    ({"delay_ms": -1.0}, "delay_ms=-1.0: must be >= 0"),
    ({"jitter_ms": 20.0}, "jitter_ms=20.0 > delay_ms=10.0"),
    ({"latency": 5.0}, r"unknown link condition\(s\) \['latency'\]"),
])
def test_bad_conditions_are_refused_by_name(update, message):
    with pytest.raises(ValueError, match=message):
        Conditions(delay_ms=10.0).changed(update)


def test_a_tbf_link_refuses_delay_and_loss_and_an_unknown_kind_is_named():
    with pytest.raises(WanUnavailable, match="use kind='emulator' for delay, jitter or loss"):
        EmulatedLink(delay_ms=100.0)
    with pytest.raises(WanUnavailable, match="unknown link kind 'netem'; known: tbf, emulator"):
        EmulatedLink(kind="netem")


def test_the_skip_reason_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert namespaces_unavailable("emulator") == "network namespaces need root"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(wan.shutil, "which", lambda tool: None if tool == "tc" else f"/usr/sbin/{tool}")
    assert namespaces_unavailable("emulator") == "tc not installed (iproute2)"
    monkeypatch.setattr(wan.shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda path: path != "/dev/net/tun" and real_exists(path))
    assert namespaces_unavailable("emulator") == "no /dev/net/tun: the link emulator needs TUN devices"
