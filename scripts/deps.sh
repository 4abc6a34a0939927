#!/usr/bin/env bash
# Installs the Debian bookworm packages HMC builds and tests with; quiet and quick when all are present.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  libboost1.81-dev liburing-dev libucx-dev ucx-utils libibverbs-dev
  libspdlog-dev libgtest-dev pybind11-dev python3-dev python3-numpy python3-pytest libamdhip64-dev
  python3-torch python3-pip python3-venv python3-setuptools python3-wheel python3-matplotlib
  libssl-dev openssl ccache clang-14 libclang-rt-14-dev lld clang-format-14
  iproute2 nftables ethtool etcd-server etcd-client openmpi-bin python3-prometheus-client
)

missing=()
for p in "${packages[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "hmc: installing missing packages: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/hmc-apt.log 2>&1; then
  $sudo apt-get update -qq >>/tmp/hmc-apt.log 2>&1
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/hmc-apt.log 2>&1 ||
    { echo "hmc: apt-get failed, see /tmp/hmc-apt.log" >&2; tail -20 /tmp/hmc-apt.log >&2; exit 1; }
fi
