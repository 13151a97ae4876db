"""The site's link to the server, measured the way FLARE uses it: round trip and upload rate after mutual TLS.

FLARE 2.9's provisioned kits speak its `http` transport to the server port: aiohttp over mutual TLS, whose only
route is the WebSocket FLARE's cells connect through. Before a site registers, that port offers nothing that sends
bulk data back, but it keeps an HTTP/1.1 connection alive across requests and, for a request to an unknown path,
answers 404 and then reads and discards the request's body before it reads the next request. So, on one connection
with the site's kit certificates:

- the round trip is the median time of a few small requests (their 404s come straight back);
- the upload rate is a POST of N random bytes followed by a small request: the second 404 can only come after the
  server has read all N bytes, so N / (time to it - one round trip) is the rate the server received at. The first
  sample (64 KiB) sizes a second one of about a second's worth, so a slow link is measured in about two seconds and
  a LAN's sample is large enough to be timed.

Nothing reaches FLARE itself (no cell connection, no log line); the server's aiohttp discards the bytes. The
download rate cannot be asked for before registration: a round's transfer is estimated from the upload rate, the
direction hospitals' links are slowest in, for the model going both ways.
"""

from __future__ import annotations

import os
import socket
import ssl
import statistics
import time
from dataclasses import dataclass

from site_agent.kit.startup import ServerRefused, SiteKit, open_server_socket

FIRST_SAMPLE_BYTES = 64 * 1024
MAX_SAMPLE_BYTES = 16 * 1024 * 1024
SAMPLE_SECONDS = 1.0
RTT_SAMPLES = 3


class LinkNotMeasured(Exception):
    """The kit's transport gives no way to measure the link (only FLARE's http transport does)."""


@dataclass(frozen=True)
class LinkMeasurement:
    rtt_s: float  # median round trip of a small request after the handshake
    upload_bytes_per_s: float  # what the server received, per second, over the timed sample
    sample_bytes: int  # the timed sample's size
    handshake_s: float  # TCP connect plus the mutual-TLS handshake

    def transfer_s(self, n_bytes: int) -> float:
        """Seconds to send `n_bytes` at the measured rate, plus one round trip."""
        return n_bytes / self.upload_bytes_per_s + self.rtt_s

    def describe(self) -> str:
        return (f"round trip {self.rtt_s * 1e3:.1f} ms, upload {mbit_s(self.upload_bytes_per_s)} "
                f"({self.sample_bytes / 2**20:.2f} MiB timed), handshake {self.handshake_s * 1e3:.0f} ms")


def mbit_s(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e6:.3g} Mbit/s"


def seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


class _Http:
    """One kept-alive HTTP/1.1 connection over the kit's mutual TLS, reading responses as they come."""

    def __init__(self, tls: ssl.SSLSocket, host: str):
        self.tls, self.host, self.buffer = tls, host, b""

    def request(self, method: str = "GET", body: bytes = b"") -> bytes:
        length = f"Content-Length: {len(body)}\r\n" if body else ""
        return f"{method} /site-agent-link-check HTTP/1.1\r\nHost: {self.host}\r\n{length}\r\n".encode() + body

    def read_response(self) -> bytes:
        """The status line of the next response, its body consumed."""
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in lines[1:]
                       if line.split(b":", 1)[0].strip().lower() == b"content-length"), 0)
        while len(self.buffer) < length:
            self._fill()
        self.buffer = self.buffer[length:]
        return lines[0]

    def _fill(self) -> None:
        try:
            data = self.tls.recv(65536)
        except (ssl.SSLError, ConnectionResetError) as exc:
            raise ServerRefused(f"the server ended the connection during the link check ({exc})") from exc
        if not data:
            raise ServerRefused("the server closed the connection during the link check")
        self.buffer += data

    def timed(self, payload: bytes, responses: int) -> float:
        start = time.perf_counter()
        self.tls.sendall(payload)
        for _ in range(responses):
            self.read_response()
        return time.perf_counter() - start


def measure_link(kit: SiteKit, timeout: float = 20.0) -> LinkMeasurement:
    """Round trip and upload rate to the kit's server (module docstring). Raises LinkNotMeasured on a transport
    other than http, ssl.SSLError / ServerRefused / OSError (TimeoutError included) as `exchange_with_server`."""
    if kit.scheme != "http":
        raise LinkNotMeasured(f"FLARE's {kit.scheme!r} transport gives no exchange to time before registration")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(kit.root_ca))
    context.check_hostname = False  # FLARE names the server by its provisioned identity; check_server checks it
    context.load_cert_chain(str(kit.certificate), str(kit.private_key))
    start = time.perf_counter()
    with open_server_socket(kit, timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with context.wrap_socket(sock) as tls:
            handshake_s = time.perf_counter() - start
            http = _Http(tls, kit.server_host)
            small = http.request()
            rtt_s = statistics.median(http.timed(small, 1) for _ in range(RTT_SAMPLES))
            first = http.timed(http.request("POST", os.urandom(FIRST_SAMPLE_BYTES)) + small, 2)
            rate = FIRST_SAMPLE_BYTES / max(first - rtt_s, first / 2)
            size = int(min(MAX_SAMPLE_BYTES, max(FIRST_SAMPLE_BYTES, rate * SAMPLE_SECONDS)))
            second = http.timed(http.request("POST", os.urandom(size)) + small, 2)
    return LinkMeasurement(rtt_s, size / max(second - rtt_s, second / 2), size, handshake_s)


def job_models(kinds: tuple[str, ...]) -> dict[str, int]:
    """Bytes of the default model (float32 state dict) of each job kind among `kinds` that sends weights every
    round: what a round moves to the site and back."""
    from fl_contract.job_params import PLayerFLParams, SegmentationParams  # torch and MONAI: seconds
    from fl_contract.models.registry import build_model

    playerfl = PLayerFLParams()
    builders = {"brats-segmentation": lambda: build_model("segresnet", **SegmentationParams().model_args()),
                "playerfl": lambda: build_model(playerfl.model, **playerfl.model_arguments())}
    return {kind: sum(t.numel() * t.element_size() for t in builders[kind]().state_dict().values())
            for kind in kinds if kind in builders}
