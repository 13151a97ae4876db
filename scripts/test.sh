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
# Two workers, one test module each at a time: the federation tests spend most of their time waiting on
# heartbeats and restarts, so two of them (or one beside a CPU-bound test) share the 2 cores well. The modules on
# the shared provisioned federation go to one worker as one unit (tests/conftest.py), and the units are handed out
# in the workers' order (federations, then the simulator's, then the rest), not by their number of tests.
exec "$root/.venv/bin/python" -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
