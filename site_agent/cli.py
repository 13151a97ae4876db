"""`site-agent`: site IT's command line (preflight check, demo data, statistics export, privacy ledger, audit log).

Each feature module owns its sub-commands through a `register(subparsers)` function that adds its parser and
sets `func` (called with the parsed args, returns the exit code). Add new modules to `_COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from site_agent import __version__

_COMMAND_MODULES = (
    "site_agent.kit.site_config",
    "site_agent.kit.preflight",
    "site_agent.kit.start",
    "site_agent.kit.enrolment",
    "site_agent.kit.service",
    "site_agent.privacy.ledger",
    "site_agent.privacy.audit",
    "site_agent.status.cli",
    "site_agent.data.demo.demo_cli",
    "site_agent.fedkt_csd.cli",
    "site_agent.summary.cli",
    "site_agent.playerfl.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="site-agent", description="Hospital site agent for federated learning.")
    parser.add_argument("--version", action="version", version=f"site-agent {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
