#!/usr/bin/env bash
# Data-parallel weak scaling, exposed gradient reduction and ZeRO memory per rank, in one run.
# One rank against two with the same per-rank micro-batch, one kernel thread per rank (so both
# runs use the same compute per rank), then ZeRO stages 0-3 at two ranks.
# Usage: bench/dp_scaling.sh [BUILD_DIR]   (extra dtrain-gpt options via DP_BENCH_ARGS)
set -euo pipefail
BUILD="${1:-build}"
GPT="$BUILD/apps/dtrain-gpt/dtrain-gpt"
MODEL=(--layers 4 --heads 4 --d-model 256 --seq-len 128 --vocab 256 --micro-batch 4
       --steps "${DP_BENCH_STEPS:-30}" --eval-every 0 --log-every 1000 ${DP_BENCH_ARGS:-})
export DTRAIN_NUM_THREADS=1
run() {  # ranks zero -> one summary line
  local np=$1 zero=$2 out
  out=$(mpiexec -n "$np" "$GPT" "${MODEL[@]}" --global-batch $((4 * np)) --zero "$zero" 2>&1)
  local toks ms exposed mem
  toks=$(sed -n 's/.*done:.*| \([0-9.]*\) tok\/s.*/\1/p' <<<"$out")
  ms=$(awk -v t="$toks" -v n="$np" 'BEGIN { printf "%.1f", 1000 * 4 * 128 * n / t }')
  exposed=$(sed -n 's/.*not hidden by compute: \([0-9.]*\) ms\/step, \([0-9.]*\)%.*/\1 ms (\2%)/p' <<<"$out")
  mem=$(sed -n 's/.*memory of rank 0 (MiB): //p' <<<"$out")
  printf '| %d | %d | %s | %s | %s | %s |\n' "$np" "$zero" "$toks" "$ms" "${exposed:--}" "$mem"
}
echo "| ranks | zero | tokens/s | ms/step | reduction not hidden | memory of rank 0 (MiB) |"
echo "|---|---|---|---|---|---|"
run 1 0
for z in 0 1 2 3; do run 2 "$z"; done
