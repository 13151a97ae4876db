#!/usr/bin/env bash
# The README's first command: set up .venv if needed, then run the loopback-federation demo (options: fl-demo --help).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$root"
exec "$root/.venv/bin/fl-demo" "$@"
