#!/usr/bin/env bash
# The README's pip install, verbatim, on a clean copy of the checkout (what git would clone, plus
# uncommitted edits; no build directory): setup.py configures its own Release build as for a user.
# Only ccache is added (through CMake's launcher variables), so reruns cost little.
#   pip_install_check.sh <source dir>
set -euo pipefail
src=$1
work=$(mktemp -d /tmp/hmc-pip-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/tree"
git -C "$src" ls-files -z --cached --others --exclude-standard |
  (cd "$src" && tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -C "$work/tree" -xf -

command=$(grep -o '/usr/bin/python3 -m venv [^`]*pip install --no-build-isolation \.' "$src/README.md")
echo "$command"
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=$work/tree CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime  # as scripts/build.sh
fi
# nice: under ctest -j the compile takes the CPU the other tests leave idle.
(cd "$work/tree" && env -u HMC_CMAKE_BUILD_DIR nice -n 19 bash -c "$command") >"$work/pip.log" 2>&1 ||
  { tail -60 "$work/pip.log"; echo "the README's pip install failed"; exit 1; }

cd /
"$work/tree/.venv/bin/python" - <<'PY'
import hmc, hmc._hmc
assert "/site-packages/hmc/" in hmc.__file__, hmc.__file__
with hmc.create_session(buffer_size=1 << 20) as sess:
    print("pip-installed hmc imports from", hmc.__file__, "and opens a session:", type(sess).__name__)
PY
echo "1 passed, 0 failed"
