#!/usr/bin/env bash
# stall_mid_save.sh MPIEXEC NPFLAG PROGRAM CKPT_TOOL DIR
# A 2-rank dtrain-gpt run saves step 2; a second run resumes and, while saving step 4, one
# rank stops dead (SIGSTOP through DTRAIN_TEST_CKPT_KILL_SIGNAL) in the middle of the
# temporary file, as on a hung node. The other waits inside HDF5's collective write, where
# only the watchdog can end it. Checks: the job ends with the watchdog's status (124) and
# its message within DTRAIN_COMM_TIMEOUT and some slack, and DIR/latest still names step 2,
# which verifies.
set -u
mpiexec=$1 npflag=$2 program=$3 tool=$4 dir=$5
args=(--layers 1 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --log-every 1000000
      --eval-every 0 --save-dir "$dir" --save-every 2)
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir"
"$mpiexec" "$npflag" 2 "$program" "${args[@]}" --steps 2 --resume none || fail "first run failed"
[ "$(cat "$dir/latest")" = step_00000002.h5 ] || fail "first run did not save step 2"

start=$(date +%s)
# (timeout's own KILL status, 137, tells a hang apart from the watchdog's 124)
DTRAIN_COMM_TIMEOUT=3 DTRAIN_TEST_CKPT_KILL_AFTER_DATASETS=5 DTRAIN_TEST_CKPT_KILL_SIGNAL=19 \
  timeout -s KILL 60 "$mpiexec" "$npflag" 2 "$program" "${args[@]}" --steps 4 --resume auto \
  > "$dir.stalled.log" 2>&1
status=$?
took=$(( $(date +%s) - start ))
cat "$dir.stalled.log"
echo "exit status $status after $took s"
[ "$status" -eq 124 ] || fail "exit status $status, expected the watchdog's 124"
grep -q "watchdog: checkpoint write on group 'world' (world ranks 0,1) made no progress for 3 s" \
  "$dir.stalled.log" || fail "no watchdog message naming the checkpoint write"
[ -f "$dir/step_00000004.h5.tmp" ] || fail "no step_00000004.h5.tmp: the rank did not stall mid-save"
[ "$(cat "$dir/latest")" = step_00000002.h5 ] || fail "latest changed to $(cat "$dir/latest")"
"$tool" verify "$dir/step_00000002.h5" || fail "step 2 no longer verifies"
echo "ok: a rank stalled mid-save ended the job through the watchdog; step 2 kept"
