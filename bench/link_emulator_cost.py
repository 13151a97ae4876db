"""What the userspace link emulator (tests/harness/link_emulator.py) costs: a bulk TCP transfer from a site's
namespace to the root namespace for a few seconds per condition, its payload rate and the emulator process's CPU
(seconds, and percent of one core over the transfer), beside a plain veth link (the tbf kind with no rate: the
kernel alone) in the same run. Needs root and /dev/net/tun.

    sudo nice -n 19 .venv/bin/python bench/link_emulator_cost.py --write-readme
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from typing import Any

import source_checkout  # noqa: F401  (sys.path: research/ and tests/harness/ of this checkout)
from harness.wan import EmulatedLink, namespaces_unavailable

CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("veth (kernel only)", "tbf", {}),
    ("emulator, unlimited", "emulator", {}),
    ("emulator, 10 Mbit/s", "emulator", {"mbit": 10.0}),
    ("emulator, 2 Mbit/s", "emulator", {"mbit": 2.0}),
    ("emulator, 100 +- 25 ms each way, 2% loss each way", "emulator",
     {"delay_ms": 100.0, "jitter_ms": 25.0, "loss_to_site": 0.02, "loss_from_site": 0.02}),
]


def transfer(link: EmulatedLink, seconds: float) -> tuple[int, float]:
    """Bytes the root namespace received from a site socket sending as fast as it can for `seconds`, and the
    time from the first byte sent to the last received."""
    server = socket.create_server((link.root_address, 0))
    received = [0]

    def drain() -> None:
        connection, _ = server.accept()
        with connection:
            while data := connection.recv(1 << 16):
                received[0] += len(data)

    sink = threading.Thread(target=drain)
    sink.start()
    client = link.site_socket()
    client.connect(server.getsockname())
    chunk, start = b"x" * (1 << 16), time.monotonic()
    while time.monotonic() - start < seconds:
        client.sendall(chunk)
    client.shutdown(socket.SHUT_WR)
    sink.join()
    elapsed = time.monotonic() - start
    client.close()
    server.close()
    return received[0], elapsed


def run(seconds: float) -> list[dict[str, Any]]:
    rows = []
    for label, kind, conditions in CASES:
        with EmulatedLink(kind=kind, **conditions) as link:
            cpu = link.emulator_cpu_seconds() if kind == "emulator" else 0.0
            size, elapsed = transfer(link, seconds)
            cpu = link.emulator_cpu_seconds() - cpu if kind == "emulator" else 0.0
        rows.append({"link": label, "mbit": size * 8 / elapsed / 1e6, "seconds": elapsed, "cpu_s": cpu})
        print(rows[-1], flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| link | payload (Mbit/s) | emulator CPU (s) | emulator CPU (% of one core) |",
             "| --- | ---: | ---: | ---: |"]
    for r in rows:
        share = f"{r['cpu_s'] / r['seconds'] * 100:.0f}%" if r["cpu_s"] else "-"
        lines.append(f"| {r['link']} | {r['mbit']:.1f} | {r['cpu_s']:.2f} | {share} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="each transfer's length")
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args(argv)
    reason = namespaces_unavailable("emulator")
    if reason:
        print(f"cannot measure the link emulator here: {reason}", file=sys.stderr)
        return 2
    text = table(run(args.seconds))
    print(text)
    if args.write_readme:
        from readme_section import write_section

        write_section("link_emulator_cost", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
