#!/usr/bin/env bash
# Checkpoint write/read throughput against `dd conv=fsync` of the same bytes, in one run,
# for the default model and a larger one where bandwidth rather than fixed cost dominates.
#   bench/ckpt_vs_dd.sh [build-dir] [scratch-dir]
# Prints, per model and rank count: file size, dtrain-gpt's logged write times (3 saves)
# and read time (1 resume, checksums verified), and dd's time for the same bytes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
SCRATCH="${2:-$(mktemp -d)}"
GPT="$BUILD/apps/dtrain-gpt/dtrain-gpt"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none

# seconds from "checkpoint: wrote ... (step N, T s)" / "resumed from ... (T s)" lines
times_of() { sed -n "s/.*$1.*[ (]\([0-9.e-]*\) s)$/\1/p"; }

run() {  # run NAME NP MODEL...
  local name=$1 np=$2
  shift 2
  local dir="$SCRATCH/$name-np$np"
  rm -rf "$dir"
  local common=(--eval-every 0 --log-every 1000 --micro-batch 1 --save-dir "$dir" --keep 5 "$@")
  local w r
  w=$(mpiexec -n "$np" "$GPT" "${common[@]}" --steps 3 --save-every 1 --resume none 2>&1 |
      times_of "checkpoint: wrote" | tr '\n' ' ')
  r=$(mpiexec -n "$np" "$GPT" "${common[@]}" --steps 3 --resume auto 2>&1 | times_of "resumed from")
  local file="$dir/step_00000003.h5"
  local bytes
  bytes=$(stat -c %s "$file")
  local t0 t1
  t0=$(date +%s.%N)
  dd if="$file" of="$dir/raw.bin" bs=1M conv=fsync status=none
  t1=$(date +%s.%N)
  rm -f "$dir/raw.bin"
  awk -v n="$name" -v np="$np" -v b="$bytes" -v w="$w" -v r="$r" -v d="$(echo "$t1 - $t0" | bc)" 'BEGIN {
    k = split(w, ws, " "); best = ws[1]; for (i = 2; i <= k; ++i) if (ws[i] < best) best = ws[i];
    printf "%-8s np %d  %11d bytes | write %s s (best %.0f MB/s, %.0f%% of dd) | read %s s (%.0f MB/s) | dd %.4f s (%.0f MB/s)\n",
           n, np, b, w, b / best / 1e6, 100 * d / best, r, b / r / 1e6, d, b / d / 1e6 }'
  rm -rf "$dir"
}

for np in 1 2; do
  run default "$np"
  run large "$np" --layers 8 --d-model 512 --heads 8 --seq-len 128
done
