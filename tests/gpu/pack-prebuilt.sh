#!/usr/bin/env bash
# Packs a CUDA build of dtrain for a GPU node that has the NVIDIA driver, CUDA's libraries
# (cuBLAS; NCCL where the plugin links it), ctest and python3, but none of dtrain's build
# dependencies: the GPU and plugin tests, dtrain-gpt and the libraries, with every shared
# library they need beyond glibc, libstdc++ and CUDA's (MPI, HDF5, OpenBLAS, Boost, ...), and
# Open MPI's launcher with its components, into one relocatable tarball.
#
#   tests/gpu/pack-prebuilt.sh BUILD_DIR OUT.tar.gz      (or .tar.xz, .tar: as the name says;
#                                                        gzip needs no xz on the GPU node)
#   tar xzf OUT.tar.gz && tests/gpu/run-device-checks.sh --prebuilt dtrain-prebuilt
#
# Build on a system whose glibc is no newer than the GPU node's. Open MPI's network
# components (UCX, libfabric, verbs, PSM) are left out: one node needs shared memory only.
set -euo pipefail

[ $# = 2 ] || { echo "usage: $0 BUILD_DIR OUT.tar.gz"; exit 2; }
# Checked first: a failed cd inside $( ) does not stop the script (the assignment takes the
# status of the last substitution), and OUT would land in /.
[ -d "$1" ] || { echo "no build directory '$1'"; exit 2; }
[ -d "$(dirname "$2")" ] || { echo "no directory for '$2'"; exit 2; }
BUILD=$(cd "$1" && pwd -P)
OUT=$(cd "$(dirname "$2")" && pwd -P)/$(basename "$2")
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
[ -f "$BUILD/libdtrain_cuda.so" ] || {
  echo "no libdtrain_cuda.so in $BUILD: configure with -DDTRAIN_ENABLE_CUDA=ON and build"; exit 1; }
MPIEXEC=$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$BUILD/CMakeCache.txt")
[ -n "$MPIEXEC" ] || { echo "$BUILD/CMakeCache.txt names no MPIEXEC_EXECUTABLE"; exit 1; }
command -v ompi_info >/dev/null || { echo "needs Open MPI (ompi_info) to pack its launcher"; exit 1; }

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
P=$STAGE/dtrain-prebuilt
LIB=$P/runtime/lib
mkdir -p "$P/build/tests/gpu" "$P/build/apps/dtrain-gpt" "$LIB" "$P/runtime/bin" \
         "$P/runtime/openmpi/components" "$P/runtime/openmpi/etc" "$P/runtime/pmix"

# ---- dtrain: the build tree's libraries, the app and the tests of tests/gpu ---------------
# (grep finds nothing where the test file names the build by another path, a link: the
# placeholder step below says so.)
missing=$({ grep -o "$BUILD/tests/gpu/test_[a-z_]*" "$BUILD/tests/gpu/CTestTestfile.cmake" || true; } | sort -u |
          while read -r exe; do [ -x "$exe" ] || basename "$exe"; done)
[ -x "$BUILD/apps/dtrain-gpt/dtrain-gpt" ] || missing="$missing dtrain-gpt"
[ -z "$missing" ] || { echo "build these first: ninja -C $BUILD" $missing; exit 1; }
cp -a "$BUILD"/libdtrain.so* "$BUILD/libdtrain_cuda.so" "$P/build/"
cp "$BUILD/apps/dtrain-gpt/dtrain-gpt" "$P/build/apps/dtrain-gpt/"
if [ -x "$BUILD/bench/cuda_gemm_formats" ]; then  # cuBLAS alone: no dtrain library
  mkdir -p "$P/build/bench"
  cp "$BUILD/bench/cuda_gemm_formats" "$P/build/bench/"
fi
find "$BUILD/tests/gpu" -maxdepth 1 -type f -perm -u+x -exec cp {} "$P/build/tests/gpu/" \;
# The tests' absolute paths become placeholders that --prebuilt fills in where it runs (the
# build tree first: it may lie inside the source tree).
python3 - "$BUILD/tests/gpu/CTestTestfile.cmake" "$P/build/tests/gpu/CTestTestfile.cmake.in" \
  "$BUILD" "$MPIEXEC" "$SRC" <<'PY'
import sys
src, dst, build, mpiexec, source = sys.argv[1:]
text = open(src).read()
for path, mark in ((build, "@BUILD@"), (mpiexec, "@MPIEXEC@"), (source, "@SRC@")):
    text = text.replace(path, mark)
if "@BUILD@" not in text:
    sys.exit(f"{src} does not name {build}: packed nothing")
open(dst, "w").write(text)
PY
echo 'subdirs("tests/gpu")' >"$P/build/CTestTestfile.cmake"

# ---- Open MPI: launcher, components, help texts ------------------------------------------
launcher=$(readlink -f "$MPIEXEC")
cp "$launcher" "$P/runtime/bin/mpiexec"
[ -x "$(dirname "$launcher")/orted" ] && cp "$(dirname "$launcher")/orted" "$P/runtime/bin/"
path_of() { ompi_info --path "$1" | sed 's/^.*: //'; }
# Components and libraries of the network stacks (names as Open MPI 4 and Debian give them).
network_components='_(ucx|uct|ofi|openib|psm2?|usnic|portals4)\.so$'
network_libraries='^lib(uc[mpst]|fabric|ibverbs|rdmacm|psm2|psm_infinipath|infinipath|efa|mca_common_(ofi|ucx|verbs))\.'
for c in "$(path_of pkglibdir)"/*.so; do
  [[ $(basename "$c") =~ $network_components ]] || cp "$c" "$P/runtime/openmpi/components/"
done
cp -r "$(path_of pkgdatadir)" "$P/runtime/openmpi/share"
pmix=$({ ldd "$(path_of pkglibdir)"/mca_pmix_ext*.so 2>/dev/null || true; } |
       awk '/libpmix/ {print $3}' | head -n 1)
[ -n "$pmix" ] && [ -d "$(dirname "$(readlink -f "$pmix")")/pmix" ] &&
  cp "$(dirname "$(readlink -f "$pmix")")"/pmix/*.so "$P/runtime/pmix/"

# ---- every shared library those need, but glibc's, the C++ runtime's and CUDA's -----------
system='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.'
cuda='^lib(cuda|cudart|cublas|cublasLt|nccl|nvidia-ml)\.'
needed=$(find "$P/build" "$P/runtime" -type f \( -name '*.so*' -o -perm -u+x \) -print0 |
  { xargs -0 ldd 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
while read -r soname path; do
  [[ $soname =~ $system || $soname =~ $cuda || $soname =~ ^libdtrain ]] && continue
  [[ $soname =~ $network_libraries ]] && continue
  [ -e "$LIB/$soname" ] || cp -L "$path" "$LIB/$soname"
done <<<"$needed"
# What the plugin needs from the GPU node, found there by run-device-checks.sh, and which
# libraries may come from the node at all (it checks that every other one is packed).
ldd "$BUILD/libdtrain_cuda.so" | awk '{print $1}' | grep -E "$cuda" >"$P/cuda-libraries" || true
printf '%s\n' "$system" "$cuda" >"$P/node-libraries"

# ---- how to run them ----------------------------------------------------------------------
cat >"$P/env.sh" <<'ENV'
# Sourced before running the prebuilt binaries (tests/gpu/run-device-checks.sh --prebuilt):
# libdtrain.so (and the CUDA plugin beside it) from build/, the rest from runtime/, since the
# binaries' run paths name the build tree they came from.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH=$here/build:$here/runtime/lib${DTRAIN_CUDA_LIBRARY_PATH:+:$DTRAIN_CUDA_LIBRARY_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$here/runtime/bin:$PATH
# Open MPI finds its components, help texts and daemon here instead of its build prefix.
export OPAL_BINDIR=$here/runtime/bin OPAL_PKGLIBDIR=$here/runtime/openmpi/components \
       OPAL_PKGDATADIR=$here/runtime/openmpi/share OPAL_SYSCONFDIR=$here/runtime/openmpi/etc
export OMPI_MCA_mca_base_component_path=$here/runtime/openmpi/components
export PMIX_MCA_mca_base_component_path=$here/runtime/pmix
export OMPI_MCA_mca_base_component_show_load_errors=0 PMIX_MCA_mca_base_component_show_load_errors=0
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
ENV
git -C "$SRC" rev-parse HEAD >"$P/commit" 2>/dev/null || echo unknown >"$P/commit"

tar -C "$STAGE" -caf "$OUT" dtrain-prebuilt  # compressed as its name says (.tar.xz, .tar)
echo "packed $(du -h "$OUT" | cut -f1) into $OUT ($(ls "$LIB" | wc -l) libraries," \
     "$(ls "$P/runtime/openmpi/components" | wc -l) Open MPI components)"
