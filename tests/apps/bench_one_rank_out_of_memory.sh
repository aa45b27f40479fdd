#!/usr/bin/env bash
# bench_one_rank_out_of_memory.sh MPIEXEC NPFLAG BENCH
# dtrain-bench where ranks cannot allocate their buffers (their address space capped at
# 1.5 GiB, under the two 1 GiB buffers, as on a node with less memory): the job must stop at
# once with one message and status 1. (1) --memcpy, where the first rank alone allocates and
# fails while the other waits for it (it used to wait until the job was killed); (2) a
# collective whose buffers no rank can allocate (one message, not one per rank).
set -u
mpiexec=$1 npflag=$2 bench=$3
capped=(prlimit --as=$((1536 * 1024 * 1024)))
run() {  # run NAME EXPECTED_MESSAGES COMMAND...: status 1 and the message EXPECTED times
  local name=$1 expected=$2
  shift 2
  local out status
  out=$(timeout -k 5 60 "$@" 2>&1)
  status=$?
  echo "$out"
  [ "$status" -eq 1 ] || { echo "FAIL: $name: exit status $status, expected 1"; exit 1; }
  [ "$(echo "$out" | grep -c '^dtrain-bench: cannot allocate .* of host memory')" -eq "$expected" ] ||
    { echo "FAIL: $name: expected one 'cannot allocate' message"; exit 1; }
}
args=(--max-bytes 1G --iters 1 --warmup 0)
run memcpy 1 "$mpiexec" "$npflag" 1 "${capped[@]}" "$bench" --memcpy "${args[@]}" : "$npflag" 1 "$bench" --memcpy "${args[@]}"
run all_reduce 1 "$mpiexec" "$npflag" 2 "${capped[@]}" "$bench" "${args[@]}"
echo "ok: ranks out of memory stop the job with one message"
