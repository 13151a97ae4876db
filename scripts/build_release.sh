#!/usr/bin/env bash
# Builds what site IT installs with pip: the wheel hospital_fl-<version>-py3-none-any.whl and the sdist
# hospital_fl-<version>.tar.gz, into dist/ (or OUTDIR), and prints their paths. The wheel is built from the sdist,
# so a file missing from the sdist fails here rather than at a hospital. --no-isolation builds with .venv's
# setuptools (the test extra pins it), so no index is needed at build time.
#   bash scripts/build_release.sh [OUTDIR]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" >&2  # stdout carries only the artifact paths
out="$(realpath -m "${1:-$root/dist}")"
version="$("$root/.venv/bin/python" -c 'from fl_contract.version import AGENT_VERSION; print(AGENT_VERSION)')"
cd "$root"
rm -f "$out/hospital_fl-$version-py3-none-any.whl" "$out/hospital_fl-$version.tar.gz"
"$root/.venv/bin/python" -m build --no-isolation --outdir "$out" >&2
ls -1 "$out/hospital_fl-$version-py3-none-any.whl" "$out/hospital_fl-$version.tar.gz"
