"""Append-only JSON-lines files that only the site's service account can read: the privacy ledger and the audit log.

The client process and each job process append to the same files, so every write holds an exclusive lock; a
reader that must decide on what it read (the budget check) holds the lock across reading and appending.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO


class Journal:
    def __init__(self, path: Path):
        self.path = Path(path)

    @contextmanager
    def locked(self) -> Iterator[TextIO]:
        """The file opened for appending (created 0600, its folder 0700 when new) under an exclusive lock."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield handle
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def append(self, record: dict[str, Any], handle: TextIO | None = None) -> None:
        """One line, stamped with the UTC time; pass the handle of `locked()` when the caller holds the lock."""
        line = json.dumps({"time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"), **record}) + "\n"
        if handle is not None:
            handle.write(line)
            handle.flush()
            return
        with self.locked() as locked:
            locked.write(line)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Rows as aligned text columns, for site IT's terminal."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    return "\n".join(
        "  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [headers, *rows]
    )
