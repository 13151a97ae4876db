"""A userspace link emulator: one process forwarding IP packets between two TUN devices (one in the root network
namespace, one in a site's), with delay and jitter, random loss per direction, a rate limit and outage.

Why userspace. On this kernel (6.18, its config read and each tried in a namespace) there is no `netem` (`tc qdisc
add ... netem`: "Specified qdisc kind is unknown"), no act_gact (`tc filter ... action gact drop random netrand ...`:
"Failed to load TC action module") and no `fq` qdisc (so no delay from a BPF program setting departure times). What
it has: `tbf` (rate; wan.py's veth link uses it), cls_bpf, and nftables with numgen, which does give
random loss (`nft add rule ... numgen random mod 100 < 10 drop` dropped 110 of 1000 datagrams; needs the `nft` tool,
not part of iproute2). None of them delays a packet, so delay, loss, rate and outage are all done here, in one
place, and the same on any Linux with /dev/net/tun.

What a packet goes through, per direction (`to_site`: root -> site, `from_site`: site -> root), in this order:

1. outage (`down`): dropped;
2. loss: dropped with probability `loss_*` (independent per packet);
3. rate (`mbit`, 0: unlimited): serialised at the rate after the packets ahead of it; one that would wait more
   than QUEUE_S in that queue is dropped (tail drop, as the tbf link's `latency 1000ms`);
4. delay: written out `delay_ms` + uniform(-`jitter_ms`, +`jitter_ms`) after it left the rate stage, but never before
   the packet ahead of it: packet order is kept (netem reorders under jitter; a VPN tunnel mostly does not, and TCP
   reads reordering as loss). So `delay_ms` is one way: a round trip takes twice it.

The process is controlled through its stdin: each line is a JSON object of conditions to change (any of the fields
of Conditions), answered on stdout by one line of counters (Counters, per direction, and the CPU seconds the
process has used); EOF on stdin, SIGTERM or SIGINT
stop it. It prints `ready` once both devices are attached. LinkEmulator starts, drives and stops it by PID.

Cost: one read and one write system call per packet in Python, at the TUN devices' 1500-byte MTU (kept so that loss
hits packets of a real link's size); bench/README.md's WAN section says what that costs.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import random
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

QUEUE_S = 1.0
"""The longest a packet waits in the rate stage before it is dropped instead (as wan.py's tbf `latency 1000ms`)."""
READY = "ready"
_TUNSETIFF = 0x400454CA
_IFF_TUN, _IFF_NO_PI = 0x0001, 0x1000
_CLONE_NEWNET = 0x40000000
_NETNS_RUN = Path("/run/netns")
_BATCH = 64  # packets read from one device before the other gets its turn


@dataclass
class Conditions:
    """A link's conditions; every field may be changed while it runs."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_to_site: float = 0.0
    loss_from_site: float = 0.0
    mbit: float = 0.0
    down: bool = False

    def __post_init__(self) -> None:
        for name in ("loss_to_site", "loss_from_site"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"link condition {name}={getattr(self, name)}: a loss is a fraction in [0, 1]")
        for name in ("delay_ms", "jitter_ms", "mbit"):
            if getattr(self, name) < 0:
                raise ValueError(f"link condition {name}={getattr(self, name)}: must be >= 0")
        if self.jitter_ms > self.delay_ms:
            raise ValueError(f"link condition jitter_ms={self.jitter_ms} > delay_ms={self.delay_ms}: "
                             "a packet cannot leave before it arrived")

    def changed(self, update: dict[str, Any]) -> Conditions:
        names = {f.name for f in fields(self)}
        unknown = sorted(set(update) - names)
        if unknown:
            raise ValueError(f"unknown link condition(s) {unknown}; known: {sorted(names)}")
        return Conditions(**{**asdict(self), **update})


@dataclass
class Counters:
    """One direction's packets: read from its device, dropped at each stage, written out, and bytes written."""

    received: int = 0
    dropped_down: int = 0
    dropped_loss: int = 0
    dropped_queue: int = 0
    sent: int = 0
    sent_bytes: int = 0


@dataclass
class _Direction:
    """One direction's queue: (release time, packet) in release order, which is arrival order."""

    loss: str  # the Conditions field of this direction's loss
    counters: Counters = field(default_factory=Counters)
    queue: deque[tuple[float, bytes]] = field(default_factory=deque)
    rate_free_at: float = 0.0  # when the rate stage has sent everything admitted so far
    last_release: float = 0.0

    def admit(self, packet: bytes, now: float, conditions: Conditions, rng: random.Random) -> None:
        self.counters.received += 1
        if conditions.down:
            self.counters.dropped_down += 1
            return
        if rng.random() < getattr(conditions, self.loss):
            self.counters.dropped_loss += 1
            return
        departure = now
        if conditions.mbit:
            start = max(now, self.rate_free_at)
            if start - now > QUEUE_S:
                self.counters.dropped_queue += 1
                return
            departure = self.rate_free_at = start + len(packet) * 8 / (conditions.mbit * 1e6)
        jitter = rng.uniform(-conditions.jitter_ms, conditions.jitter_ms) if conditions.jitter_ms else 0.0
        release = max(departure + (conditions.delay_ms + jitter) / 1000, self.last_release)
        self.last_release = release
        self.queue.append((release, packet))

    def release(self, now: float, device: int) -> None:
        while self.queue and self.queue[0][0] <= now:
            _, packet = self.queue.popleft()
            try:
                os.write(device, packet)
            except OSError:  # the device is down (its end set down, the namespace going): as a lost packet
                self.counters.dropped_down += 1
                continue
            self.counters.sent += 1
            self.counters.sent_bytes += len(packet)


def join_namespace(name: str) -> None:
    """Move the calling thread (only it) into the named network namespace (`ip netns add NAME`): sockets and TUN
    devices it opens belong there. Python 3.11 has no os.setns, hence libc's."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open(_NETNS_RUN / name) as handle:
        if libc.setns(handle.fileno(), _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into network namespace {name} failed")


def open_tun(device: str) -> int:
    """Attach to the TUN device `device` of the calling thread's namespace (made by `ip tuntap add mode tun`),
    non-blocking, packets without the protocol header."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", device.encode(), _IFF_TUN | _IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


def forward(root: int, site: int, control: int, conditions: Conditions, seed: int | None = None) -> None:
    """The emulator's loop, until EOF on `control`: packets from `root` go to `site` (to_site) and back
    (from_site) through _Direction; a JSON line on `control` changes the conditions and is answered on stdout."""
    rng = random.Random(seed)
    directions = {root: _Direction("loss_to_site"), site: _Direction("loss_from_site")}
    other = {root: site, site: root}
    pending = b""
    while True:
        now = time.monotonic()
        heads = [d.queue[0][0] for d in directions.values() if d.queue]
        timeout = max(0.0, min(heads) - now) if heads else None
        readable, _, _ = select.select([root, site, control], [], [], timeout)
        now = time.monotonic()
        for device in readable:
            if device == control:
                chunk = os.read(control, 4096)
                if not chunk:
                    return
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    conditions = _apply(conditions, line, directions[root].counters, directions[site].counters)
                continue
            for _ in range(_BATCH):
                try:
                    packet = os.read(device, 65536)
                except BlockingIOError:
                    break
                directions[device].admit(packet, now, conditions, rng)
        for device, direction in directions.items():
            direction.release(time.monotonic(), other[device])


def _apply(conditions: Conditions, line: bytes, to_site: Counters, from_site: Counters) -> Conditions:
    """One control line: the conditions it sets (or, on a bad line, the old ones and an `error`), then the counters."""
    reply: dict[str, Any] = {}
    if line.strip():
        try:
            conditions = conditions.changed(json.loads(line))
        except (ValueError, TypeError) as exc:
            reply["error"] = str(exc)
    reply.update(conditions=asdict(conditions), to_site=asdict(to_site), from_site=asdict(from_site),
                 cpu_s=time.process_time())
    print(json.dumps(reply), flush=True)
    return conditions


class LinkEmulator:
    """The emulator process for one site's pair of TUN devices (`root_device` in the root namespace,
    `site_device` in `namespace`, both made by the caller): started in __init__, changed with `set`, counters from
    `counters`, stopped by `stop` (EOF, then SIGKILL to its PID after a grace period). Thread-safe."""

    def __init__(self, namespace: str, root_device: str, site_device: str, conditions: Conditions,
                 seed: int | None = None, python: str = sys.executable):
        argv = [python, str(Path(__file__).resolve()), "--namespace", namespace, "--root-device", root_device,
                "--site-device", site_device, "--conditions", json.dumps(asdict(conditions))]
        if seed is not None:
            argv += ["--seed", str(seed)]
        self._lock = threading.Lock()
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, bufsize=1)
        self.pid = self.process.pid
        line = self._readline(timeout=20)
        if line.strip() != READY:
            self.process.kill()
            _, error = self.process.communicate(timeout=10)
            raise RuntimeError(f"link emulator for namespace {namespace} did not start: {(line + error).strip()}")

    def _readline(self, timeout: float) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        return self.process.stdout.readline() if ready else ""

    def _ask(self, update: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write(json.dumps(update) + "\n")
                self.process.stdin.flush()
            except BrokenPipeError as exc:
                raise RuntimeError(f"link emulator (pid {self.pid}) has exited{self._exit_detail()}") from exc
            line = self._readline(timeout=10)
        if not line:
            raise RuntimeError(f"link emulator (pid {self.pid}) did not answer{self._exit_detail()}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise ValueError(reply["error"])
        return reply

    def _exit_detail(self) -> str:
        """Its exit status and last error line, once it has exited (its stderr is only read then)."""
        status = self.process.poll()
        if status is None or self.process.stderr is None:
            return ""
        lines = self.process.stderr.read().strip().splitlines()
        return f" with status {status}" + (f": {lines[-1]}" if lines else "")

    def set(self, **update: Any) -> Conditions:
        """Change some conditions (Conditions' fields); returns them all as now set."""
        return Conditions(**self._ask(update)["conditions"])

    def counters(self) -> dict[str, Counters]:
        reply = self._ask({})
        return {name: Counters(**reply[name]) for name in ("to_site", "from_site")}

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the emulator process has used so far."""
        return float(self._ask({})["cpu_s"])

    def stop(self, grace: float = 5.0) -> None:
        if self.process.poll() is None:
            try:
                if self.process.stdin is not None:
                    self.process.stdin.close()
                self.process.wait(grace)
            except (OSError, subprocess.TimeoutExpired):
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait(grace)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--root-device", required=True)
    parser.add_argument("--site-device", required=True)
    parser.add_argument("--conditions", default="{}", help="JSON object of Conditions' fields")
    parser.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    conditions = Conditions().changed(json.loads(args.conditions))
    root = open_tun(args.root_device)
    join_namespace(args.namespace)  # the process is single-threaded: all of it moves
    site = open_tun(args.site_device)
    print(READY, flush=True)
    try:
        forward(root, site, sys.stdin.fileno(), conditions, args.seed)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
