#!/usr/bin/env bash
# `pip install .` works offline with Debian's tooling: installs into a throw-away venv that sees
# Debian's python3-* packages, reusing the already-built tree, then imports hmc from elsewhere.
set -euo pipefail
src=$1 build=$2
venv=$(mktemp -d /tmp/hmc-venv-XXXXXX)
trap 'rm -rf "$venv"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$venv"
HMC_CMAKE_BUILD_DIR=$build "$venv/bin/pip" install -q --no-build-isolation --no-index "$src"
cd "$venv"
"$venv/bin/python" - <<'PY'
import hmc, hmc._hmc
assert "/site-packages/hmc/" in hmc.__file__, hmc.__file__
print("pip-installed hmc imports from", hmc.__file__)
PY
echo "1 passed, 0 failed"
