#!/usr/bin/env bash
# The README's second command: set up .venv if needed, check style and types (ruff, mypy; settings in pyproject.toml),
# then run the whole test suite (extra args go to pytest).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$root"
echo "ruff check ."
"$root/.venv/bin/ruff" check .
echo "mypy (strict on fl_contract and server_app)"
"$root/.venv/bin/mypy"
exec "$root/.venv/bin/python" -m pytest "$@"
