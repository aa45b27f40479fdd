#!/usr/bin/env bash
# jobscript_requeue.sh SCRIPT: runs a SLURM job script with stand-ins for srun (one "rank"
# that, on SIGUSR1, moves `latest` or not and exits with a given status) and scontrol (which
# records its arguments), and checks when it requeues: after SLURM's warning signal reached
# the script, on status 3, or on a signal status (> 128: a site that kills the other ranks
# when the first exits) when `latest` was written anew (a save, or the rewrite of a stop with
# nothing new to save); never after an error or success, nor when the
# signal reached the ranks but not the script (scancel --signal to the steps). Also that a
# warning during the set-up reaches srun, and that srun's status survives srun ending while
# the trap runs.
set -u
script=$1
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d) || fail "no temporary directory"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/ckpt"
cat > "$work/bin/srun" <<'STUB'
#!/usr/bin/env bash
# The stand-in rank: waits for SIGUSR1, then saves (1), writes `latest` anew naming the
# same checkpoint as a stop with nothing new to save does (same), or neither (0), and exits
# with $FAKE_STATUS.
on_usr1() {
  local name=
  [ "$FAKE_SAVES" = 1 ] && name=step_00000009.h5
  [ "$FAKE_SAVES" = same ] && name=step_00000001.h5
  # as dtrain-gpt writes it: a new file renamed over the old
  [ -n "$name" ] && echo "$name" > "$CKPT_DIR/latest.tmp" && mv "$CKPT_DIR/latest.tmp" "$CKPT_DIR/latest"
  exit "$FAKE_STATUS"
}
trap on_usr1 USR1
echo $$ > "$READY"
sleep 30 &  # in the background: the signal ends this process at once, as a quick rank would
wait $!
exit 0
STUB
# scontrol records its arguments; "show config" (the set-up) also says the script is there
cat > "$work/bin/scontrol" <<STUB
#!/bin/sh
echo "\$@" >> "$work/requeued"
[ "\$1" = show ] && echo \$PPID > "$work/setup" && sleep 0.5
exit 0
STUB
chmod +x "$work/bin/srun" "$work/bin/scontrol"

# run STATUS SAVES [direct|early]: runs the script and signals it (with "direct": the
# stand-in rank instead; with "early": the script during its set-up, before srun starts);
# its status must be srun's; $work/result says whether it requeued (y/n).
run() {
  rm -f "$work/requeued" "$work/ready" "$work/setup"
  echo step_00000001.h5 > "$work/ckpt/latest"
  PATH="$work/bin:$PATH" CKPT_DIR="$work/ckpt" READY="$work/ready" FAKE_STATUS=$1 FAKE_SAVES=$2 \
    SLURM_CPUS_PER_TASK=2 SLURM_JOB_NAME=test SLURM_JOB_ID=42 bash "$script" > "$work/log" 2>&1 &
  local pid=$!
  if [ "${3:-}" = early ]; then
    for _ in $(seq 1 100); do [ -s "$work/setup" ] && break; sleep 0.1; done
    [ -s "$work/setup" ] || fail "the script did not reach its set-up: $(cat "$work/log")"
    kill -USR1 "$pid"
  fi
  for _ in $(seq 1 100); do [ -s "$work/ready" ] && break; sleep 0.1; done
  [ -s "$work/ready" ] || fail "the stand-in srun did not start: $(cat "$work/log")"
  case "${3:-}" in
    direct) kill -USR1 "$(cat "$work/ready")" ;;
    early) ;;
    *) kill -USR1 "$pid" ;;
  esac
  wait "$pid"
  local status=$?
  [ "$status" -eq "$1" ] || fail "the script exited $status, srun $1"
  if [ -e "$work/requeued" ] && grep -q "^requeue 42$" "$work/requeued"; then echo y; else echo n; fi > "$work/result"
}
requeued() { [ "$(cat "$work/result")" = y ]; }
run 3 1; requeued || fail "status 3 after a save did not requeue"
run 143 1; requeued || fail "status 143 after a save the script asked for did not requeue"
run 143 0; requeued && fail "status 143 without a save requeued"
run 143 same; requeued || fail "status 143 after a stop with nothing new to save did not requeue"
run 1 0; requeued && fail "an error requeued"
run 1 1; requeued && fail "an error after a regular save requeued"
run 0 1; requeued && fail "a finished run requeued"
run 3 1 direct; requeued && fail "a stop the script did not ask for requeued"
run 3 1 early; requeued || fail "a warning during the set-up did not reach srun"
# Stops that save no new step end the chain at the third in a row; a new step starts the
# count again.
run 3 same; requeued || fail "a first stop without a new step did not requeue"
run 3 same; requeued || fail "a second stop without a new step did not requeue"
run 3 same; requeued && fail "a third stop in a row without a new step requeued"
grep -q "3 runs in a row stopped before saving a new step" "$work/log" || fail "no word on the ended chain: $(cat "$work/log")"
run 3 1; requeued || fail "a stop with a new step after stalled ones did not requeue"
run 3 same; requeued || fail "the count of stalled stops did not start again after a new step"
run 1 0; run 3 same; run 3 same
requeued || fail "a chain that ended (an error) left its count of stalled stops to the next"
# srun ending the moment the warning interrupts the script's wait: its status, every time
for _ in 1 2 3 4 5 6 7 8; do
  run 0 1; requeued && fail "a run that finished as the warning came requeued"
done
echo "ok: requeued after the warning signal on 3 and on a signal status with a save, not otherwise"
