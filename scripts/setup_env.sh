#!/usr/bin/env bash
# Creates the project's virtual environment in .venv and installs the project into it, once per pyproject.toml
# version (idempotent). torch==2.13.0 goes in first: an unpinned torch pulled in by another package would be a
# multi-GB CUDA build. Sourced by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x "$root/.venv/bin/python" ]; then
  echo "creating $root/.venv with $python"
  "$python" -m venv "$root/.venv"
fi
stamp="$root/.venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "installing torch==2.13.0, then the project and its dependencies (first run only)"
  "$root/.venv/bin/python" -m pip install -q --upgrade pip
  "$root/.venv/bin/python" -m pip install -q "torch==2.13.0"
  "$root/.venv/bin/python" -m pip install -q -e "$root[test]"
  rm -f "$root"/.venv/.installed-*
  touch "$stamp"
fi
