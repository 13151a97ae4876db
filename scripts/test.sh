#!/usr/bin/env bash
# The README's second command: set up .venv if needed, then run the whole test suite (extra args go to pytest).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$root"
exec "$root/.venv/bin/python" -m pytest "$@"
