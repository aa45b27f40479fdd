#!/usr/bin/env bash
# kill_mid_save.sh MPIEXEC NPFLAG PROGRAM CKPT_TOOL DIR [kill|stall]
# A 2-rank dtrain-gpt run saves step 2; a second run resumes and, while saving step 4, one
# rank is killed (DTRAIN_TEST_CKPT_KILL_AFTER_DATASETS) in the middle of the temporary
# file, or with `stall` stops dead (SIGSTOP, as on a hung node): the other then waits inside
# HDF5's collective write, where only the watchdog can end it. Checks: the run fails (a
# stall: with the watchdog's status 124 and message, within DTRAIN_COMM_TIMEOUT=10 and 30 s
# of slack for the start and the resume), DIR/latest still names step 2, that file
# verifies, no step_00000004.h5 appeared, and (after a kill) --resume auto continues from
# step 2.
set -u
mpiexec=$1 npflag=$2 program=$3 tool=$4 dir=$5 mode=${6:-kill}
args=(--layers 1 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --log-every 1000000
      --eval-every 0 --save-dir "$dir" --save-every 2)
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir"
"$mpiexec" "$npflag" 2 "$program" "${args[@]}" --steps 2 --resume none || fail "first run failed"
[ "$(cat "$dir/latest")" = step_00000002.h5 ] || fail "first run did not save step 2"

start=$(date +%s)
if [ "$mode" = stall ]; then
  # (timeout's TERM lets mpiexec take its ranks down, the stopped one too, should the
  # watchdog not fire; its status, 143 or 137, tells a hang apart from the watchdog's 124)
  DTRAIN_COMM_TIMEOUT=10 DTRAIN_TEST_CKPT_KILL_AFTER_DATASETS=5 \
  DTRAIN_TEST_CKPT_KILL_SIGNAL=$(kill -l STOP) \
    timeout -k 10 -s TERM 60 "$mpiexec" "$npflag" 2 "$program" "${args[@]}" --steps 4 \
    --resume auto > "$dir.killed.log" 2>&1
else
  DTRAIN_TEST_CKPT_KILL_AFTER_DATASETS=5 "$mpiexec" "$npflag" 2 "$program" "${args[@]}" \
    --steps 4 --resume auto > "$dir.killed.log" 2>&1
fi
status=$?
took=$(( $(date +%s) - start ))
cat "$dir.killed.log"
echo "exit status $status after $took s"
[ "$status" -ne 0 ] || fail "the run with a $mode rank exited 0"
if [ "$mode" = stall ]; then
  [ "$status" -eq 124 ] || fail "exit status $status, expected the watchdog's 124"
  grep -q "watchdog: checkpoint write on group 'world' (world ranks 0,1) made no progress for 10 s" \
    "$dir.killed.log" || fail "no watchdog message naming the checkpoint write"
  [ "$took" -lt 55 ] || fail "the watchdog took $took s to end a 10 s stall"
fi
[ -f "$dir/step_00000004.h5.tmp" ] || fail "no step_00000004.h5.tmp: the rank was not stopped mid-save"
[ "$(cat "$dir/latest")" = step_00000002.h5 ] || fail "latest changed to $(cat "$dir/latest")"
[ ! -e "$dir/step_00000004.h5" ] || fail "a half-written step_00000004.h5 was published"
"$tool" verify "$dir/step_00000002.h5" || fail "step 2 no longer verifies"
if [ "$mode" = stall ]; then
  echo "ok: a rank stalled mid-save ended the job through the watchdog; step 2 kept"
  exit 0
fi

out=$("$mpiexec" "$npflag" 2 "$program" "${args[@]}" --steps 4 --resume auto 2>&1)
status=$?
echo "$out"
[ "$status" -eq 0 ] || fail "resumed run exited $status"
echo "$out" | grep -q "resumed from .*step_00000002.h5 at step 2" || fail "did not resume from step 2"
echo "$out" | grep -q "done: 4 steps" || fail "resumed run did not reach step 4"
"$tool" verify "$dir/step_00000004.h5" || fail "step 4 of the resumed run does not verify"
echo "ok: killed mid-save, step 2 kept and resumed"
