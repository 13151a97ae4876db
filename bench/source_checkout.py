"""Importing this puts what a source checkout holds beside the wheel's packages on sys.path: the repository root (for
research/, the research drivers) and tests/ (for tests/harness/, imported as `harness`). Neither is installed at a
site; bench scripts run from the checkout (`.venv/bin/python bench/<script>.py`), and import this before either."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for folder in (str(ROOT), str(ROOT / "tests")):
    if folder not in sys.path:
        sys.path.append(folder)
