#!/usr/bin/env bash
# Installs, from Debian's packages, whatever ferry's build and tests need and
# this machine lacks. Idempotent and non-interactive; uses sudo when not root.
set -euo pipefail

packages=(
  g++ gcc cmake ninja-build pkg-config make
  libboost-dev              # Boost.DLL (plugin loader), header-only
  libdlpack-dev             # DLPack device codes, checked against the ABI
  libssl-dev                # HMAC-SHA256 for the job secret (connection auth)
  nlohmann-json3-dev        # JSON reports (ferry info, conformance, bench)
  libgtest-dev libgmock-dev # conformance suite and unit tests
  libbenchmark-dev
  libfabric-dev libfabric-bin # fabric plugin (skipped without it) and fi_pingpong
  libtensorpipe-dev         # bench: TensorPipe's shm transport beside the shm plugin
  binutils                  # nm, to check plugins export one symbol
  clang-format              # the tree's style (.clang-format, scripts/format.sh)
  clang libfuzzer-14-dev    # fuzz targets under ASan+UBSan (scripts/fuzz.sh, ctest fuzz.smoke)
  iproute2 procps           # ip netns, ps/kill in process tests
  python3 python3-dev pybind11-dev     # Python bindings (bindings/python)
  python3-numpy python3-pytest python3-torch python3-venv python3-pip
  python3-setuptools        # pip install of the bindings, offline
  libtorch-dev              # bindings/torch: the torch.distributed.rpc backend (skipped without it)
  g++-aarch64-linux-gnu libssl-dev:arm64  # the aarch64 cross build (scripts/cross-build-aarch64.sh)
  libmsgpack-cxx-dev python3-msgpack     # typed C++ functions (ferry/typed.hpp) and their Python caller
)
if [ "${FERRY_SETUP_PLOT:-0}" = 1 ]; then
  packages+=(python3 python3-matplotlib)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The cross build's arm64 libraries (":arm64" packages) need Debian's arm64
# archive beside this machine's (multiarch).
if printf '%s\n' "${missing[@]}" | grep -q ':arm64$' &&
  ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $sudo dpkg --add-architecture arm64
fi
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
