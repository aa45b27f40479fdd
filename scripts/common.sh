# shellcheck shell=bash
# Shared by scripts/main.sh and scripts/test.sh: install missing packages, configure, build.
# Sourced, not run.
set -euo pipefail

DTRAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${DTRAIN_BUILD_DIR:-$DTRAIN_ROOT/build}"
JOBS="${DTRAIN_JOBS:-$(nproc)}"

DTRAIN_PACKAGES=(
  build-essential cmake ninja-build gfortran pkg-config
  openmpi-bin libopenmpi-dev
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev
  libopenblas-openmp-dev
  libgtest-dev
  abigail-tools doxygen
  python3 python3-numpy python3-h5py python3-regex
)

# DTRAIN_SKIP_INSTALL=1: the dependencies come from elsewhere (modules, another distribution).
install_packages() {
  [ "${DTRAIN_SKIP_INSTALL:-0}" = 1 ] && return 0
  command -v dpkg-query >/dev/null && command -v apt-get >/dev/null || {
    echo "dtrain: no apt here: install the packages of scripts/common.sh (or their equivalents)" \
         "yourself and set DTRAIN_SKIP_INSTALL=1" >&2
    exit 1
  }
  local missing=()
  for p in "${DTRAIN_PACKAGES[@]}"; do
    # "install ok installed", or "hold ok installed" for a package held at its version
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q " ok installed$" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dtrain: installing ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "dtrain: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  # A fresh machine's unattended upgrades may hold dpkg's lock for a while: wait for it.
  local wait_lock=(-o DPkg::Lock::Timeout=600)
  $sudo apt-get "${wait_lock[@]}" update -qq
  # Through env: sudo would drop the variable from its environment.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get "${wait_lock[@]}" install -y -qq --no-install-recommends "${missing[@]}"
}

# configure_and_build [--target NAME] [CMAKE_ARGS...]: NAME alone is built (default: all).
configure_and_build() {
  local generator=() target=()
  if [ "${1:-}" = --target ]; then
    target=(--target "$2")
    shift 2
  fi
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$DTRAIN_ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
  cmake --build "$BUILD_DIR" -j "$JOBS" "${target[@]}"
}

# What Open MPI needs in this environment (never set by the library itself).
mpi_environment() {
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  export OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
}
