#!/usr/bin/env bash
# steady_state.sh SHIM PROGRAM ARGS...: PROGRAM ARGS --steps 10 and --steps 40, one rank and
# one thread, with SHIM (count_allocations.c) preloaded: the thirty extra training steps must
# make no heap allocation. MPI's start-up varies by a few allocations from run to run, so the
# counts at exit may differ by fewer than one a step (a single allocation a step adds 30).
set -u
shim=$1
shift
name=$(basename "$1")
# One log a run: the singleton's daemon (orted) can outlive the program and print its own
# count after it, so a log shared by both runs could get that line written past the end of
# the second run's truncated file (a hole of NUL bytes that makes grep call it binary).
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# The count at exit of a run that must train all its steps: the shim prints a count on any
# exit, so a refused or stopped run would otherwise compare two start-ups and pass.
count() {
  local steps=$1
  shift
  local log="$logs/$steps.log"
  OMP_NUM_THREADS=1 LD_PRELOAD="$shim" "$@" --steps "$steps" >"$log" 2>&1
  local status=$?
  if [ $status -ne 0 ] || ! grep -aq "done: $steps steps" "$log"; then
    echo "FAIL: the $steps-step run exited with $status without training all its steps:" >&2
    tail -5 "$log" >&2
    return 1
  fi
  grep -aE "^allocations of $name: [0-9]+\$" "$log" | tail -1 | awk '{print $NF}'
}
ten=$(count 10 "$@") || exit 1
forty=$(count 40 "$@") || exit 1
echo "allocations at exit: $ten after 10 steps, $forty after 40"
[ -n "$ten" ] && [ -n "$forty" ] || { echo "FAIL: no count printed"; exit 1; }
extra=$(( forty - ten ))
[ "${extra#-}" -lt 30 ] || { echo "FAIL: $extra allocations in 30 more steps"; exit 1; }
echo "ok: no allocation in a steady step"
