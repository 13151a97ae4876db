"""`fl-provision`'s entry point: central provisioning (`fl-provision --workspace ...`, every key made here) or
one of the distributed commands (`fl-provision init | approve | ...`, each participant makes its own key)."""

from __future__ import annotations

import sys

from provisioning import distributed, provision


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in distributed.COMMANDS:
        return distributed.main(argv)
    return provision.main(argv)


if __name__ == "__main__":
    sys.exit(main())
