#!/usr/bin/env bash
# check_prebuilt.sh BUILD_DIR: packs the build with tests/gpu/pack-prebuilt.sh (uncompressed,
# into a scratch directory), unpacks it and runs run-device-checks.sh --prebuilt on it with
# --packaging-only: the packed plugin tests and a 2-rank CPU run through the packed mpiexec.
# Where mount namespaces are allowed (root), the build tree and the system's Open MPI are
# hidden while it runs, as on a node without them, so nothing can fall back to them.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$1" && pwd -P)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$here/pack-prebuilt.sh" "$build" "$work/prebuilt.tar" || exit 1
tar -C "$work" -xf "$work/prebuilt.tar" || exit 1
check=("$here/run-device-checks.sh" --prebuilt "$work/dtrain-prebuilt" --packaging-only)
export RESULTS_DIR=$work/results
cd "$work" || exit 1  # not from inside the build tree about to be hidden
mkdir -p "$work/empty" "$work/probe"
if ! unshare -m --propagation private mount --bind "$work/empty" "$work/probe" 2>/dev/null; then
  echo "(mount namespaces not allowed here: the build tree and Open MPI stay visible)"
  "${check[@]}"
  exit
fi
ompi_lib=$(ompi_info --path pkglibdir | sed 's/^.*: //')
ompi_share=$(ompi_info --path pkgdatadir | sed 's/^.*: //')
launcher=$(readlink -f "$(command -v mpiexec)")
unshare -m --propagation private bash -c '
  empty=$1 launcher=$2; shift 2
  for d in "$@"; do
    [ "$d" = -- ] && { shift; break; }
    mount --bind "$empty" "$d" || exit 1
    shift
  done
  mount --bind /dev/null "$launcher" || exit 1
  echo "hidden: the build tree, Open MPI components and help texts, $launcher"
  exec "$@"' _ "$work/empty" "$launcher" "$build" "$ompi_lib" "$ompi_share" -- "${check[@]}"
