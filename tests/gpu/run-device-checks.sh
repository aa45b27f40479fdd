#!/usr/bin/env bash
# Builds dtrain with its CUDA plugin for Hopper (sm_90), runs the GPT-2 124M benchmark and
# every GPU test on one GPU, and prints tokens/s and MFU. The most valuable figure comes
# first: a one-step smoke run (which stops everything with the plugin's message when the GPU
# path does not start), the default 124M benchmark, then the GPU tests, several ranks on one
# GPU, the benchmark variants, cuBLAS's GEMM formats, a profile, Nsight Compute and
# generation. Every phase has its own time limit, cut to what is left of BUDGET_S (a phase
# with under 10 s left is skipped, saying so, and listed at the end), so the script ends
# within BUDGET_S and an outer `timeout` (BUDGET_S plus a margin) is only a safety net; logs,
# the metrics of each run and summary.txt are written as it goes. On an H200 with --prebuilt it took 130 s before the Nsight Compute
# phase was added. With --prebuilt, for example (a lent machine returning few files):
#
#   RESULTS_DIR=/tmp/res timeout -k 5 400 tests/gpu/run-device-checks.sh --prebuilt DIR
#   tar -C /tmp -czf OUT/results.tgz --exclude=checkpoints res
#
#   tests/gpu/run-device-checks.sh [BUILD_DIR]          (default: build-gpu in the source tree)
#   tests/gpu/run-device-checks.sh --prebuilt DIR       (DIR: tests/gpu/pack-prebuilt.sh's
#                                                        tarball, unpacked; no build here)
#   tests/gpu/run-device-checks.sh --prebuilt DIR --packaging-only
#                     (no GPU needed: the plugin tests and a 2-rank CPU run from DIR, to check
#                      the packing itself; the prebuilt.packaging test runs it)
#
# Needs a GPU with its driver, the CUDA toolkit (nvcc, cuBLAS; NCCL optional) and dtrain's
# usual build dependencies (CMake, Ninja, MPI, parallel HDF5, Boost, OpenBLAS, GoogleTest);
# with --prebuilt only the driver (CUDA 13 or newer), CUDA's libraries and python3 (ctest for
# the test phase, which is skipped without it).
# Environment (all optional):
#   BUDGET_S      seconds for the whole run (default 380; without --prebuilt 300 more for
#                 configure and build)
#   JOBS          parallel build jobs (default: all cores)
#   RESULTS_DIR   where logs and the summary go (default: BUILD_DIR/device-checks)
#   MICRO_BATCH   benchmark sequences per step (default 16, i.e. 16384 tokens)
#   BENCH_STEPS   benchmark steps (default 20; the first 5 are warm-up and not averaged)
#   PRECISION     --precision of the benchmark (default bf16: bf16 tensor-core GEMMs on 16-bit
#                 copies of the operands, fp32 masters; fp32 gives TF32 GEMMs)
#   PEAK_TFLOPS   the GPU's dense peak for that precision (default: the H100/H200 SXM
#                 datasheet's 989.4 for bf16 and fp16, 494.7 for TF32)
#   PLUGIN_VARIANTS "NAME=PATH ...": other builds of libdtrain_cuda.so from the same commit
#                 (a kernel changed, say), each timed in a 10-step benchmark run of its own
#                 (DTRAIN_CUDA_PLUGIN=PATH), 35 s at most each: A/B comparisons in one run
#   SANITIZER_LIMIT seconds for each compute-sanitizer tool (racecheck, synccheck, memcheck)
#                 on the fused attention's kernel test (default 45; 0 skips them), run only
#                 where compute-sanitizer is found; an error it reports fails the checks
#   NCU_LIMIT     seconds for the Nsight Compute phase (default 60; 0 skips it), which runs
#                 only where ncu is on the PATH and never fails the checks
# Exit status: 0 when the build, every test and the benchmark succeeded.
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PREBUILT='' PACKAGING_ONLY=''
if [ "${1:-}" = --prebuilt ]; then
  # Checked here: a failed cd inside $( ) would leave PREBUILT empty and build from source.
  [ -d "${2:-}" ] || { echo "--prebuilt needs the unpacked directory (got '${2:-}')"; exit 2; }
  PREBUILT=$(cd "$2" && pwd)
  BUILD=$PREBUILT/build
  [ "${3:-}" = --packaging-only ] && PACKAGING_ONLY=1
else
  BUILD=${1:-$SRC/build-gpu}
fi
JOBS=${JOBS:-$(nproc)}
RESULTS=${RESULTS_DIR:-$BUILD/device-checks}
MICRO_BATCH=${MICRO_BATCH:-16}
BENCH_STEPS=${BENCH_STEPS:-20}
PRECISION=${PRECISION:-bf16}
PEAK_GIVEN=${PEAK_TFLOPS:+1}
case "$PRECISION" in
  fp32) PEAK_TFLOPS=${PEAK_TFLOPS:-494.7} ;;
  *) PEAK_TFLOPS=${PEAK_TFLOPS:-989.4} ;;
esac
START=$(date +%s)
STATUS=0

elapsed() { echo $(( $(date +%s) - START )); }
BUDGET_S=${BUDGET_S:-380}
[ "${1:-}" = --prebuilt ] || BUDGET_S=$((BUDGET_S + 300))
# within NOMINAL: sets LIMIT to NOMINAL seconds or what is left of the budget (5 s kept for
# the summary), whichever is less; fails, saying so, when under 10 s are left.
within() {
  LIMIT=$(( BUDGET_S - $(elapsed) - 5 ))
  [ "$LIMIT" -gt "$1" ] && LIMIT=$1
  [ "$LIMIT" -ge 10 ] && return 0
  echo "skipped: the ${BUDGET_S} s budget is spent"
  SKIPPED+=("$CURRENT_PHASE")
  return 1
}
# Phases skipped for the budget (and phase() keeps the current one's title for them).
SKIPPED=() CURRENT_PHASE=
# The summaries' python3 and ctest run with the node's own library path (--prebuilt puts
# its packed libraries first, which are for dtrain's binaries, not the node's tools); the
# tests ctest starts get the packed path from their CTest file (below).
NODE_LIBRARY_PATH=${LD_LIBRARY_PATH-}
COMPAT_DIR=''
# CUDA's compat libcuda, where the driver is too old (below), first for everything.
with_compat() {
  [ -z "$COMPAT_DIR" ] && return
  export LD_LIBRARY_PATH=$COMPAT_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  NODE_LIBRARY_PATH=$COMPAT_DIR${NODE_LIBRARY_PATH:+:$NODE_LIBRARY_PATH}
}
node_env() {
  if [ -n "$NODE_LIBRARY_PATH" ]; then env LD_LIBRARY_PATH="$NODE_LIBRARY_PATH" "$@"
  else env -u LD_LIBRARY_PATH "$@"; fi
}
py() { node_env python3 "$@"; }
phase() { CURRENT_PHASE=$*; echo; echo "=== [$(elapsed) s] $*"; }
fail() { echo "FAILED: $*"; STATUS=1; }

mkdir -p "$RESULTS"
exec > >(tee "$RESULTS/run.log") 2>&1
TEE_PID=$!
# At exit: close the pipe and wait for tee, so run.log holds the verdict before the caller
# packs it.
finish_log() { exec >&- 2>&-; wait "$TEE_PID" 2>/dev/null; }
trap finish_log EXIT

phase "prerequisites"
# A Python environment's CMake wheel has its ctest beside its python3.
if ! command -v ctest >/dev/null && command -v python3 >/dev/null; then
  venv_bin=$(dirname "$(command -v python3)")
  [ -x "$venv_bin/ctest" ] && PATH=$PATH:$venv_bin
fi
TOOLS=(cmake ninja nvcc nvidia-smi mpiexec python3 ctest ldd)
[ -n "$PREBUILT" ] && TOOLS=(nvidia-smi python3 ldd)
[ -n "$PACKAGING_ONLY" ] && TOOLS=(ctest python3 ldd)
for tool in "${TOOLS[@]}"; do
  command -v "$tool" >/dev/null || { echo "missing: $tool (see the header of this script)"; exit 2; }
done
HAVE_CTEST=1
command -v ctest >/dev/null || { HAVE_CTEST=''; echo "warning: no ctest here: the test phase is skipped"; }
[ -n "$PACKAGING_ONLY" ] ||
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || {
    echo "nvidia-smi sees no GPU: nothing to check here"; exit 2; }
# The plugin is built with CUDA 13: an older driver cannot run it (cudart's error 35).
if [ -z "$PACKAGING_ONLY" ]; then
  driver_cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\)\..*/\1/p' | head -n 1)
  if [ -n "$driver_cuda" ] && [ "$driver_cuda" -lt 13 ]; then
    echo "warning: this driver supports CUDA $driver_cuda, the plugin needs 13 or newer"
    for compat in /usr/local/cuda*/compat; do  # CUDA's forward-compatibility libcuda
      [ -e "$compat/libcuda.so.1" ] && COMPAT_DIR=$compat && echo "using $compat" && break
    done
    with_compat
  fi
fi
# The default peak is the SXM datasheet's; PCIe and NVL parts are slower.
if [ -z "$PACKAGING_ONLY$PEAK_GIVEN" ] &&
   nvidia-smi --query-gpu=name --format=csv,noheader | grep -qiE 'pcie|nvl'; then
  echo "warning: MFU below is against $PEAK_TFLOPS TFLOP/s, an SXM part's peak; set PEAK_TFLOPS for this GPU"
fi
[ -z "$PREBUILT" ] && nvcc --version | tail -n 1
# Open MPI refuses root and more ranks than cores unless told; this is the test environment,
# the library never sets these.
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
# Shared memory without cross-process reads (a sandbox may refuse them), one BLAS thread
# per rank, as the test suite runs.
export OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1

if [ -n "$PREBUILT" ]; then
  phase "prebuilt binaries in $PREBUILT (commit $(cat "$PREBUILT/commit"))"
  [ "$(git -C "$SRC" rev-parse HEAD 2>/dev/null)" = "$(cat "$PREBUILT/commit")" ] ||
    echo "warning: this checkout is not the commit the binaries were built from"
  # CUDA's libraries the plugin links, from the CUDA toolkit or its Python wheels: one pass
  # over the usual places, links followed.
  mapfile -t SONAMES <"$PREBUILT/cuda-libraries"
  # The loader's cache, CUDA's own directories and Python wheels' first; a search of the
  # usual places (links followed, 30 s at most) only for what they lack.
  CANDIDATES=()
  for soname in "${SONAMES[@]}"; do
    while read -r f; do CANDIDATES+=("$f"); done < <(
      { ldconfig -p 2>/dev/null | awk -v n="$soname" '$1 == n {print $NF}'
        ls -d /usr/local/cuda*/lib64/"$soname" /usr/local/cuda*/targets/*/lib/"$soname" \
              /usr/local/lib/python3*/dist-packages/nvidia/*/lib/"$soname" \
              /usr/lib/python3/dist-packages/nvidia/*/lib/"$soname" 2>/dev/null; } )
  done
  NAME_TESTS=()
  for soname in "${SONAMES[@]}"; do
    printf '%s\n' ${CANDIDATES[@]+"${CANDIDATES[@]}"} | grep -q "/$soname\$" ||
      NAME_TESTS+=(${NAME_TESTS[@]+-o} -name "$soname")
  done
  if [ ${#NAME_TESTS[@]} -gt 0 ]; then
    mapfile -t -O "${#CANDIDATES[@]}" CANDIDATES < <(timeout 30 find -L /usr/local /usr/lib /usr/lib64 /opt \
      \( "${NAME_TESTS[@]}" \) 2>/dev/null)
  fi
  CUDA_DIRS=
  for soname in "${SONAMES[@]}"; do
    found=
    for f in ${CANDIDATES[@]+"${CANDIDATES[@]}"}; do
      [ "$(basename "$f")" = "$soname" ] && [ -e "$f" ] || continue
      # cuBLASLt from cuBLAS's directory when it is there: one release of the pair
      [ -z "$found" ] || [ "$(dirname "$f")" = "${CUBLAS_DIR:-}" ] && found=$f
    done
    [ -n "$found" ] || { echo "missing on this node: $soname"; exit 2; }
    echo "$soname: $found"
    case "$soname" in libcublas.so.*) CUBLAS_DIR=$(dirname "$found") ;; esac
    CUDA_DIRS=$CUDA_DIRS${CUDA_DIRS:+:}$(dirname "$found")
  done
  export DTRAIN_CUDA_LIBRARY_PATH=$CUDA_DIRS
  # shellcheck source=/dev/null
  source "$PREBUILT/env.sh"
  [ -n "$COMPAT_DIR" ] && export LD_LIBRARY_PATH=$COMPAT_DIR:$LD_LIBRARY_PATH  # before the driver's own
  MPIEXEC=$PREBUILT/runtime/bin/mpiexec
  # Every library a packed file loads comes from the tarball, but those the node provides
  # (glibc's, the C++ runtime's, CUDA's: node-libraries). One found elsewhere would be a
  # build of the node's own; one not found stops everything that needs it.
  elsewhere=$(find "$PREBUILT/build" "$PREBUILT/runtime" -type f \( -name '*.so*' -o -perm -u+x \) \
      -print0 | { xargs -0 ldd 2>/dev/null || true; } |
    awk -v root="$PREBUILT/" '$2 == "=>" && index($3, root) != 1 {print $1, $3}' |
    grep -Ev -f "$PREBUILT/node-libraries" | sort -u)
  if [ -n "$elsewhere" ]; then
    echo "$elsewhere" | head -n 20
    fail "packed files load the libraries above from outside the tarball"
  fi
  # The CTest file sets the packed library path for the tests it starts (ctest itself runs
  # with the node's: node_env).
  py - "$BUILD/tests/gpu/CTestTestfile.cmake" "$BUILD" "$SRC" "$MPIEXEC" "$LD_LIBRARY_PATH" <<'PY'
import sys
out, build, source, mpiexec, library_path = sys.argv[1:]
text = open(out + ".in").read()
for mark, path in (("@BUILD@", build), ("@SRC@", source), ("@MPIEXEC@", mpiexec)):
    text = text.replace(mark, path)
# ctest --timeout applies only to tests without one: one hung test must not take the phase.
import re
text = re.sub(r'TIMEOUT "\d+"', 'TIMEOUT "60"', text)
open(out, "w").write(f'set(ENV{{LD_LIBRARY_PATH}} "{library_path}")\n' + text)
PY
  timeout -k 5 30 "$MPIEXEC" -n 2 "$BUILD/apps/dtrain-gpt/dtrain-gpt" --version </dev/null \
    >"$RESULTS/mpiexec.log" 2>&1 || {
    tail -n 20 "$RESULTS/mpiexec.log"; echo "the prebuilt mpiexec cannot start two ranks"; exit 1; }
  head -n 1 "$RESULTS/mpiexec.log"
else
MPIEXEC=mpiexec
phase "configure (CUDA on, sm_90, Release) in $BUILD"
timeout 60 cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDTRAIN_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DDTRAIN_BUILD_TESTS=ON -DDTRAIN_BUILD_APPS=ON >"$RESULTS/configure.log" 2>&1 || {
  tail -n 30 "$RESULTS/configure.log"; echo "configure failed"; exit 1; }
grep -E "NCCL" "$RESULTS/configure.log" || true

phase "build (plugin, app, GPU and plugin tests; $JOBS jobs)"
TARGETS=(dtrain dtrain_cuda dtrain-gpt test_cuda_plugin test_cuda_kernels test_cuda_casts
         test_cuda_arenas test_cuda_gemm_tensor_cores test_cuda_gpt_step test_device_comm
         test_plugin_loader test_cuda_host_logic test_capi_device test_capi_device_comm cuda_gemm_formats)
timeout 240 ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}" >"$RESULTS/build.log" 2>&1 || {
  grep -E "error|FAILED" "$RESULTS/build.log" | head -n 40; echo "build failed"; exit 1; }
echo "built in $(elapsed) s"
fi

if [ -n "$PACKAGING_ONLY" ]; then
  phase "packaging only: plugin tests and 2 CPU ranks from $PREBUILT"
  node_env ctest --test-dir "$BUILD" -L plugin -E '^plugin\.loader\.missing$' --output-on-failure \
    --timeout 50 >"$RESULTS/ctest.log" 2>&1 || fail "ctest reported failures"
  grep -E "Test +#|tests passed" "$RESULTS/ctest.log"
  timeout 60 "$MPIEXEC" -n 2 "$BUILD/apps/dtrain-gpt/dtrain-gpt" --device cpu --layers 1 \
    --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --steps 3 --dp 2 --zero 2 \
    --eval-every 0 >"$RESULTS/cpu_ranks.log" 2>&1 && grep -q "done: 3 steps" "$RESULTS/cpu_ranks.log" ||
    { fail "2 CPU ranks through the packed mpiexec"; tail -n 5 "$RESULTS/cpu_ranks.log"; }
  [ "$STATUS" = 0 ] && echo "PACKAGING CHECKS PASSED" || echo "PACKAGING CHECKS FAILED"
  exit $STATUS
fi

GPT2=("$BUILD/apps/dtrain-gpt/dtrain-gpt" --device cuda
      --layers 12 --heads 12 --d-model 768 --seq-len 1024 --vocab 50257
      --micro-batch "$MICRO_BATCH" --warmup-steps 10 --log-every 1 --eval-every 0 --eval-batches 1)
BENCH=("${GPT2[@]}" --precision "$PRECISION")
rm -f "$RESULTS/summary.txt"

# benchmark NAME LIMIT_S STEPS [OPTION...]: one run of BENCH plus the options; its tokens/s
# and MFU (median over the steps after the 5th) go to summary.txt under NAME.
benchmark() {
  local name=$1 limit=$2 steps=$3
  shift 3
  local json="$RESULTS/bench-$name.jsonl"
  rm -f "$json"
  within "$limit" || return 0
  limit=$LIMIT
  echo "--- $name: ${DTRAIN_CUDA_FUSED_ATTENTION:+DTRAIN_CUDA_FUSED_ATTENTION=$DTRAIN_CUDA_FUSED_ATTENTION }${DTRAIN_CUDA_GEMM_EPILOGUE:+DTRAIN_CUDA_GEMM_EPILOGUE=$DTRAIN_CUDA_GEMM_EPILOGUE }${*:-default options}, $steps steps"
  timeout -k 5 "$limit" "$MPIEXEC" -n 1 "${BENCH[@]}" "$@" --steps "$steps" --metrics "$json" \
    </dev/null >"$RESULTS/bench-$name.log" 2>&1 || fail "benchmark $name failed (see bench-$name.log)"
  grep -E "layout|done:|memory of|rror" "$RESULTS/bench-$name.log" | head -n 5
  # Where cuBLASLt turned the bias epilogue down (the run then adds biases outside the GEMMs)
  grep -E "CUDA plugin: .* gave " "$RESULTS/bench-$name.log" | sed "s/^/$name: /" | tee -a "$RESULTS/summary.txt"
  if [ ! -s "$json" ]; then
    fail "benchmark $name wrote no metrics"
    return
  fi
  py - "$json" "$PEAK_TFLOPS" "$MICRO_BATCH" "$name ${*:-}" <<'PY' | tee -a "$RESULTS/summary.txt"
import json, statistics, sys
path, peak_tflops, micro_batch, name = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [json.loads(line) for line in open(path) if line.strip()]
steady = [r for r in rows if r["step"] > 5] or rows  # steps 1-5 include set-up and warm-up
L, C, T, V = 12, 768, 1024, 50257
# GptModel::flops_per_token (docs/model.md): 6 * matmul parameters + 12 * L * C * T
flops_per_token = 6.0 * (L * 12.0 * C * C + V * C) + 12.0 * L * C * T
tps = statistics.median(r["tokens_per_s"] for r in steady)
step_ms = statistics.median(r["step_ms"] for r in steady)
mfu_nominal = tps * flops_per_token / (peak_tflops * 1e12)
mfu_app = statistics.median(r["mfu"] for r in steady if r.get("mfu") is not None)
print(f"== {name.strip()}")
print(f"steps averaged: {len(steady)} (median), micro-batch {micro_batch} x 1024 tokens")
print(f"tokens/s: {tps:.0f}   step: {step_ms:.1f} ms   model FLOPs/token: {flops_per_token:.4g}")
print(f"MFU vs {peak_tflops:g} TFLOP/s (datasheet dense peak): {100 * mfu_nominal:.1f}%")
print(f"MFU as dtrain-gpt reports it (vs the GEMM rate it measures at start-up): {100 * mfu_app:.1f}%")
print(f"final loss: {rows[-1]['loss']:.4f}")
PY
  [ "${PIPESTATUS[0]}" = 0 ] || fail "could not read the metrics of benchmark $name"
}

phase "smoke: one step of a 1-layer model on the GPU"
# Everything below needs the GPU path: where it does not start (a driver too old for the
# plugin, CUDA's libraries missing), stop here with its message rather than time out phase
# after phase.
timeout -k 5 30 "$MPIEXEC" -n 1 "$BUILD/apps/dtrain-gpt/dtrain-gpt" --device cuda --layers 1 \
  --d-model 64 --heads 2 --seq-len 32 --micro-batch 2 --steps 1 --eval-every 0 --eval-batches 1 \
  </dev/null >"$RESULTS/smoke.log" 2>&1 && grep -q "done: 1 steps" "$RESULTS/smoke.log" || {
  tail -n 20 "$RESULTS/smoke.log"; echo "the GPU path does not start: nothing else can run"; exit 1; }
grep -E "device|layout" "$RESULTS/smoke.log" | head -n 2

phase "benchmark: GPT-2 124M (12 layers, 12 heads, d 768, seq 1024, vocab 50257), micro-batch $MICRO_BATCH, $PRECISION"
status_before=$STATUS
benchmark default 120 "$BENCH_STEPS"
if [ "$STATUS" != "$status_before" ]; then
  # A figure all the same, without the paths a GPU had not run when they landed: the fused
  # attention, cuBLASLt's epilogues, and the 16-bit saved activations that the GEMMs and
  # kernels read as words (fp32 activations and parameters, as run 2's fastest setting).
  DTRAIN_CUDA_FUSED_ATTENTION=0 DTRAIN_CUDA_GEMM_EPILOGUE=0 benchmark without-new-paths 60 10 \
    --fp32-activations --param-storage fp32
fi

phase "GPU and plugin tests (ctest -L 'gpu|plugin')"
# Packed, libdtrain.so's directory is on the library path, so a plugin is always found there:
# the "missing plugin" scenario cannot happen.
EXCLUDE=()
[ -n "$PREBUILT" ] && EXCLUDE=(-E '^plugin\.loader\.missing$')
# -V: the passing tests' measurements (errors against the CPU, tensor-core GEMM gaps) are
# what this phase is for.
if [ -z "$HAVE_CTEST" ]; then
  echo "skipped: no ctest"
elif within 100; then
  node_env timeout -k 5 "$LIMIT" ctest --test-dir "$BUILD" -L 'gpu|plugin' ${EXCLUDE[@]+"${EXCLUDE[@]}"} -V \
    --timeout 60 -j 4 </dev/null >"$RESULTS/ctest.log" 2>&1 || fail "ctest reported failures"
  grep -E "Test +#|tests passed|tests failed|Skipped|relative error|loss (cpu|after)|gradients:|worst parameter|words moved|(TF32|bf16|fp16) gemm|device collectives" \
    "$RESULTS/ctest.log" || true
  # With a GPU present nothing may skip: a skip would mean the plugin did not find the device.
  if grep -q "Skipped" "$RESULTS/ctest.log"; then
    fail "GPU tests skipped on a machine with a GPU"
    grep -B2 -A2 "skipped:" "$RESULTS/ctest.log" | head -n 20
  fi
fi

phase "several ranks on one GPU: DP 2 (ZeRO 1, 2, 3) and TP 2 over mpi_staged against one rank; bf16, fp16"
# NCCL refuses two ranks on one GPU, so this runs the Trainer's device path over MPI staging;
# the routing itself is checked on the CPU by the device_path test. Exact fp32 GEMMs: TF32's
# rounding would differ between TP's split GEMMs and the whole ones by more than the bound.
# ZeRO 2/3 run the arenas in virtual memory (chunks unmapped and mapped back every step).
SMALL=(--device cuda --layers 2 --heads 4 --d-model 128 --seq-len 64 --vocab 256
       --micro-batch 4 --global-batch 16 --steps 20 --warmup-steps 5 --log-every 1
       --eval-every 0 --eval-batches 1)
# And one rank in bf16 and fp16 (tensor-core GEMMs) against its fp32 curve, bf16 with the
# parameters in 16-bit words (their arena chunks mapped around each pass), which --param-storage
# auto leaves out for so small a model. The TP run also generates text after training (logits
# gathered over the group); the first run writes checkpoints, which a resumed run reads below.
CKPT="$RESULTS/checkpoints"
rm -rf "$CKPT"
multi_skipped=
for layout in "1 --zero 1 +save" "2 --dp 2 --zero 1" \
              "2 --tp 2 --zero 1 --generate 16" "2 --dp 2 --zero 2" "2 --dp 2 --zero 3" \
              "1 --zero 1 --precision bf16 --param-storage 16bit" \
              "1 --zero 1 --precision fp16 --loss-scale 4096"; do
  read -r ranks rest <<<"$layout"
  read -r -a extra <<<"${rest% +save}"
  # "+save": this run writes the checkpoints (its path kept whole, spaces and all).
  [ "$rest" != "${rest% +save}" ] && extra+=(--save-dir "$CKPT" --save-every 10)
  name="ranks_${ranks}_${rest% +save}"
  name=${name// /}
  rm -f "$RESULTS/$name.jsonl"
  within 20 || { multi_skipped=1; break; }
  DTRAIN_DEVICE_COMM=mpi_staged DTRAIN_CUDA_TF32=0 timeout -k 5 "$LIMIT" "$MPIEXEC" -n "$ranks" \
    "$BUILD/apps/dtrain-gpt/dtrain-gpt" "${SMALL[@]}" "${extra[@]}" </dev/null \
    --metrics "$RESULTS/$name.jsonl" >"$RESULTS/$name.log" 2>&1 \
    || { fail "$ranks ranks (${extra[*]}) on one GPU failed"; tail -n 5 "$RESULTS/$name.log"; }
done
# The checkpoint of step 10, written from device memory, resumed into a new run: steps 11-20
# must follow the uninterrupted run.
rm -f "$RESULTS/resumed.jsonl"
[ -z "$multi_skipped" ] && within 20 || multi_skipped=1
[ -n "$multi_skipped" ] || { DTRAIN_CUDA_TF32=0 timeout -k 5 "$LIMIT" "$MPIEXEC" -n 1 "$BUILD/apps/dtrain-gpt/dtrain-gpt" \
  "${SMALL[@]}" --zero 1 --resume "$CKPT/step_00000010.h5" </dev/null \
  --metrics "$RESULTS/resumed.jsonl" >"$RESULTS/resumed.log" 2>&1 \
  || { fail "the run resumed from a GPU checkpoint failed"; tail -n 5 "$RESULTS/resumed.log"; }; }
[ -n "$multi_skipped" ] && echo "loss curves not compared: runs were skipped" ||
py - "$RESULTS" <<'PY' || fail "GPU loss curves left the reference curve"
import json, sys
d = sys.argv[1]
def losses(name):  # [] for a run that wrote nothing (it failed above)
    try:
        return [json.loads(l)["loss"] for l in open(f"{d}/{name}.jsonl") if l.strip()]
    except (OSError, ValueError):
        return []
ref = losses("ranks_1_--zero1")
ok = True
for name in ("ranks_2_--dp2--zero1", "ranks_2_--tp2--zero1--generate16", "ranks_2_--dp2--zero2",
             "ranks_2_--dp2--zero3"):
    got = losses(name)
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref)) if len(got) == len(ref) else 1.0
    print(f"{name}: {len(got)} steps, largest relative loss difference from one rank {worst:.2e}")
    ok &= len(got) == len(ref) and worst <= 1e-4
# 16-bit GEMM operands round the activations too: the CPU, which rounds only the weights, saw
# 3.2e-3 (bf16) and 5.5e-4 (fp16) on this model; allow about ten times the bf16 gap.
for name in ("ranks_1_--zero1--precisionbf16--param-storage16bit",
             "ranks_1_--zero1--precisionfp16--loss-scale4096"):
    got = losses(name)
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref)) if len(got) == len(ref) else 1.0
    print(f"{name}: {len(got)} steps, largest relative loss difference from fp32 {worst:.2e}")
    ok &= len(got) == len(ref) and 0 < worst <= 3e-2
# Kernels without atomics in a fixed order: the resumed steps should match to rounding.
got = losses("resumed")
worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref[10:])) if len(got) == 10 else 1.0
print(f"resumed from the step-10 checkpoint: {len(got)} steps, largest relative loss "
      f"difference from the uninterrupted run {worst:.2e}")
ok &= len(got) == 10 and worst <= 1e-5
sys.exit(0 if ok else 1)
PY

phase "benchmark variants"
if [ "$PRECISION" != fp32 ]; then
  # The unfused attention (cuBLAS GEMMs around a softmax kernel, T x T probabilities saved)
  # against the default fused kernels.
  DTRAIN_CUDA_FUSED_ATTENTION=0 benchmark unfused-attention 35 10
  # What 16-bit storage costs where memory is plentiful: the per-pass widening and remapping
  # of the parameter units (which --param-storage auto leaves out here), and the conversion
  # passes around each block.
  benchmark 16bit-params 35 10 --param-storage 16bit
  benchmark fp32-storage 35 10 --fp32-activations --param-storage fp32
  # The same model in fp32 (TF32 GEMMs), for comparison; its MFU is against the 16-bit peak.
  BENCH=("${GPT2[@]}" --precision fp32)
  benchmark fp32-tf32 35 10
  BENCH=("${GPT2[@]}" --precision "$PRECISION")
fi

if [ -n "${PLUGIN_VARIANTS:-}" ]; then
  phase "plugin variants: $PLUGIN_VARIANTS"
  for variant in $PLUGIN_VARIANTS; do
    name=${variant%%=*} path=${variant#*=}
    [ -f "$path" ] || { fail "plugin variant $name: no file $path"; continue; }
    DTRAIN_CUDA_PLUGIN=$(cd "$(dirname "$path")" && pwd)/$(basename "$path") \
      benchmark "plugin-$name" 35 10
  done
fi

phase "cuBLAS at GPT-2 124M's GEMM shapes: fp32 storage against bf16 in memory"
if [ ! -x "$BUILD/bench/cuda_gemm_formats" ]; then
  echo "no $BUILD/bench/cuda_gemm_formats: skipped"
elif within 30; then
  timeout -k 5 "$LIMIT" "$BUILD/bench/cuda_gemm_formats" $((MICRO_BATCH * 1024)) </dev/null 2>&1 |
    tee "$RESULTS/gemm-formats.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || fail "cuda_gemm_formats failed (see gemm-formats.txt)"
fi

phase "where the GPU time goes: 10 benchmark steps with DTRAIN_CUDA_PROFILE=1"
if within 45; then
  DTRAIN_CUDA_PROFILE=1 timeout -k 5 "$LIMIT" "$MPIEXEC" -n 1 "${BENCH[@]}" --steps 10 </dev/null \
    >"$RESULTS/profile.log" 2>&1 || fail "profiled run failed (see profile.log)"
  sed -n '/GPU time by op/,$p' "$RESULTS/profile.log" | head -n 45 | tee "$RESULTS/profile.txt"
fi

# Generation with the key/value cache, GPT-2 124M's shape with its initial weights (the speed
# does not depend on them).
phase "generation: 256 tokens of GPT-2 124M after a 512-token prompt"
PROMPT=$(py -c "print(','.join(str(i * 7919 % 50000) for i in range(512)))")
if within 30; then
  timeout -k 5 "$LIMIT" "$MPIEXEC" -n 1 "${BENCH[@]}" --steps 0 --generate 256 --prompt "$PROMPT" \
    </dev/null >/dev/null 2>"$RESULTS/generate.log" || fail "generation failed (see generate.log)"
  grep -E "generated 256 tokens" "$RESULTS/generate.log" | tee -a "$RESULTS/summary.txt"
fi

# The fused attention's kernels under compute-sanitizer: shared-memory races and barrier
# misuse, which the CPU emulation (warps one at a time) may not show, and memory errors.
SANITIZER_LIMIT=${SANITIZER_LIMIT:-45}
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ "$SANITIZER_LIMIT" -gt 0 ] && [ -n "$SANITIZER" ]; then
  phase "compute-sanitizer: the fused attention's kernel test (racecheck, synccheck, memcheck)"
  for tool in racecheck synccheck memcheck; do
    within "$SANITIZER_LIMIT" || break
    # the tool with the node's libraries, the test it runs with the packed ones
    node_env timeout -k 5 "$LIMIT" "$SANITIZER" --tool "$tool" --target-processes all --error-exitcode 99 \
      env LD_LIBRARY_PATH="${LD_LIBRARY_PATH-}" DTRAIN_CUDA_TF32=0 "$BUILD/tests/gpu/test_cuda_kernels" \
      --gtest_filter='*FusedAttention*' </dev/null >"$RESULTS/sanitizer_$tool.log" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Race reported|Barrier error|Invalid" "$RESULTS/sanitizer_$tool.log" | head -n 5
    # (a filter that matched no test, after a rename, would pass having run nothing)
    if [ "$rc" = 0 ] && ! grep -qE "\[  PASSED  \] [1-9]" "$RESULTS/sanitizer_$tool.log"; then rc=no-test; fi
    case $rc in
      0) echo "compute-sanitizer $tool: clean" | tee -a "$RESULTS/summary.txt" ;;
      124|137) echo "compute-sanitizer $tool did not finish in $LIMIT s" | tee -a "$RESULTS/summary.txt" ;;
      *) fail "compute-sanitizer $tool: status $rc (sanitizer_$tool.log)" ;;
    esac
  done
fi

# Last: the fused attention kernels' hardware counters (occupancy, memory and pipe use, stall
# reasons): what to change in them next. Informational: a failure here fails nothing.
NCU_LIMIT=${NCU_LIMIT:-60}
if [ "$NCU_LIMIT" -gt 0 ] && command -v ncu >/dev/null; then
  phase "Nsight Compute: the first fused attention launches of one benchmark step"
  # ncu with the node's libraries, the run it profiles with the packed ones
  within "$NCU_LIMIT" && { node_env timeout -k 5 "$LIMIT" ncu --clock-control none --target-processes all \
    -k regex:flash -c 3 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis \
    env LD_LIBRARY_PATH="${LD_LIBRARY_PATH-}" "$MPIEXEC" -n 1 "${BENCH[@]}" --steps 1 </dev/null >"$RESULTS/ncu.txt" 2>&1 ||
    echo "ncu did not finish (see ncu.txt); nothing depends on it"; }
  grep -E "flash_|Duration|Achieved Occupancy|Registers Per|Memory Throughput|Compute \(SM\) Th|Stall|Theoretical Occ" \
    "$RESULTS/ncu.txt" 2>/dev/null | head -n 40
fi

phase "done in $(elapsed) s (budget $BUDGET_S s); results in $RESULTS"
if [ ${#SKIPPED[@]} -gt 0 ]; then
  printf 'skipped for the budget: %s\n' "${SKIPPED[@]}" | awk '!seen[$0]++' | tee -a "$RESULTS/summary.txt"
fi
[ -n "$HAVE_CTEST" ] || echo "skipped: the GPU tests (no ctest)" | tee -a "$RESULTS/summary.txt"
if [ "$STATUS" != 0 ]; then echo "SOME DEVICE CHECKS FAILED"
elif [ ${#SKIPPED[@]} -gt 0 ] || [ -z "$HAVE_CTEST" ]; then echo "THE DEVICE CHECKS RUN PASSED (some were skipped)"
else echo "ALL DEVICE CHECKS PASSED"; fi
exit $STATUS
