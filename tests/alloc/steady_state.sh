#!/usr/bin/env bash
# steady_state.sh SHIM PROGRAM ARGS...: PROGRAM ARGS --steps 10 and --steps 40, one rank and
# one thread, with SHIM (count_allocations.c) preloaded: the thirty extra training steps must
# make no heap allocation. MPI's start-up varies by a few allocations from run to run, so the
# counts at exit may differ by fewer than one a step (a single allocation a step adds 30).
set -u
shim=$1
shift
name=$(basename "$1")
count() {
  OMP_NUM_THREADS=1 LD_PRELOAD="$shim" "$@" 2>&1 >/dev/null | grep -E "^allocations of $name: [0-9]+\$" |
    tail -1 | awk '{print $NF}'
}
ten=$(count "$@" --steps 10)
forty=$(count "$@" --steps 40)
echo "allocations at exit: $ten after 10 steps, $forty after 40"
[ -n "$ten" ] && [ -n "$forty" ] || { echo "FAIL: no count printed"; exit 1; }
extra=$(( forty - ten ))
[ "${extra#-}" -lt 30 ] || { echo "FAIL: $extra allocations in 30 more steps"; exit 1; }
echo "ok: no allocation in a steady step"
