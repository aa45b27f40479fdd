#!/usr/bin/env bash
# jobscript_requeue.sh SCRIPT: runs a SLURM job script with stand-ins for srun (one "rank"
# that, on SIGUSR1, moves `latest` or not and exits with a given status) and scontrol (which
# records its arguments), sends the script SLURM's warning signal, and checks when it
# requeues: on status 3; on another status only when `latest` moved after the signal (a site
# that kills the other ranks when the first exits); never after a plain failure or success.
set -u
script=$1
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d) || fail "no temporary directory"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/ckpt"
cat > "$work/bin/srun" <<'STUB'
#!/usr/bin/env bash
# The stand-in rank: waits for SIGUSR1, then saves (or not) and exits with $FAKE_STATUS.
on_usr1() {
  [ "$FAKE_SAVES" = 1 ] && echo step_00000009.h5 > "$CKPT_DIR/latest"
  exit "$FAKE_STATUS"
}
trap on_usr1 USR1
echo ready > "$READY"
for _ in $(seq 1 300); do sleep 0.1; done
exit 0
STUB
printf '#!/bin/sh\necho "$@" >> "%s/requeued"\n' "$work" > "$work/bin/scontrol"
chmod +x "$work/bin/srun" "$work/bin/scontrol"

# run STATUS SAVES: runs the script; its status must be srun's; $work/result says whether it
# requeued (y/n).
run() {
  rm -f "$work/requeued" "$work/ready"
  echo step_00000001.h5 > "$work/ckpt/latest"
  PATH="$work/bin:$PATH" CKPT_DIR="$work/ckpt" READY="$work/ready" FAKE_STATUS=$1 FAKE_SAVES=$2 \
    SLURM_CPUS_PER_TASK=2 SLURM_JOB_NAME=test SLURM_JOB_ID=42 bash "$script" > "$work/log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do [ -e "$work/ready" ] && break; sleep 0.1; done
  [ -e "$work/ready" ] || fail "the stand-in srun did not start: $(cat "$work/log")"
  kill -USR1 "$pid"
  wait "$pid"
  local status=$?
  [ "$status" -eq "$1" ] || fail "the script exited $status, srun $1"
  if [ -e "$work/requeued" ] && grep -q "^requeue 42$" "$work/requeued"; then echo y; else echo n; fi > "$work/result"
}
requeued() { [ "$(cat "$work/result")" = y ]; }
run 3 1; requeued || fail "status 3 after a save did not requeue"
run 143 1; requeued || fail "status 143 after a save the script asked for did not requeue"
run 143 0; requeued && fail "status 143 without a save requeued"
run 1 0; requeued && fail "an error requeued"
run 0 0; requeued && fail "a finished run requeued"
echo "ok: requeued on 3 and on a stop that saved, not otherwise"
