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
# --quick: the everyday tier, every test but the whole-federation fault and network scenarios (marker `faults`,
# pyproject.toml); CI runs them all. What each takes: the README, section "Tests".
quick=()
if [ "${1:-}" = "--quick" ]; then
  shift
  quick=(-m "not faults")
fi
# Four workers, one unit of work each at a time, on the machine's 2 cores: the federation tests spend much of their
# time waiting on heartbeats, restarts and each other's processes (bench/README.md, the suite's CPU). The tests on the
# shared provisioned federation go to one worker as one unit (tests/conftest.py), and the units are handed out in the
# workers' order (federations, then the simulator's, then the rest), not by their number of tests.
exec "$root/.venv/bin/python" -m pytest -n "${PYTEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder "${quick[@]}" "$@"
