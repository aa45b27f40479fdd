#!/usr/bin/env bash
# signal_resume.sh MPIEXEC NPFLAG PROGRAM DIR SIGNAL TARGET [mid-step]
# Starts a long 2-rank dtrain-gpt run, sends SIGNAL to TARGET (mpiexec: it forwards the
# signal; ranks: as SLURM signals every task), then checks: exit status 3, a checkpoint
# named by DIR/latest, and that --resume auto continues from its step to the end.
# mid-step: the run is one step of 100 000 micro-batches a rank, which the signal stops
# part-way (the checkpoint is step 0); the resumed run trains with one micro-batch a step.
# Otherwise every step is logged to --metrics, whose last record must be the checkpoint's step.
set -u
mpiexec=$1 npflag=$2 program=$3 dir=$4 sig=$5 target=$6 mode=${7:-}
args=(--layers 1 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --eval-every 0 --save-dir "$dir")
long=(--steps 100000000 --log-every 1 --metrics "$dir.jsonl")
[ "$mode" = mid-step ] && long=(--steps 1 --global-batch 400000 --log-every 1000000)
rm -rf "$dir" "$dir.jsonl"
"$mpiexec" "$npflag" 2 "$program" "${args[@]}" "${long[@]}" > "$dir.log" 2>&1 &
pid=$!
source "$(dirname "$0")/wait_for_training.sh"
wait_for_training "$dir.log" || { kill -KILL "$pid"; cat "$dir.log"; echo "FAIL: the run did not start training"; exit 1; }
if [ "$mode" = mid-step ]; then
  sleep 1
else
  # Signal after a step is done (its metrics record written): a signal during step 1 would
  # rightly stop at step 0, which this mode does not expect.
  for _ in $(seq 600); do [ -s "$dir.jsonl" ] && break; sleep 0.1; done
  [ -s "$dir.jsonl" ] || { kill -KILL "$pid"; cat "$dir.log"; echo "FAIL: no step finished in 60 s"; exit 1; }
fi
if [ "$target" = ranks ]; then
  source "$(dirname "$0")/ranks_of.sh"
  ranks=$(ranks_of "$pid" "$(basename "$program")")
  [ -n "$ranks" ] || { kill -KILL "$pid"; echo "FAIL: no rank found under process $pid"; exit 1; }
  kill -s "$sig" $ranks 2>/dev/null
else
  kill -s "$sig" "$pid"
fi
wait "$pid"
status=$?
tail -n 20 "$dir.log"
[ "$status" -eq 3 ] || { echo "FAIL: exit status $status, expected 3"; exit 1; }
[ -f "$dir/latest" ] || { echo "FAIL: no $dir/latest"; exit 1; }
name=$(cat "$dir/latest")
[ -f "$dir/$name" ] || { echo "FAIL: latest names missing $name"; exit 1; }
step=$((10#$(echo "$name" | sed 's/step_\([0-9]*\)\.h5/\1/')))
if [ "$mode" = mid-step ]; then
  [ "$step" -eq 0 ] || { echo "FAIL: checkpoint at step $step, expected 0"; exit 1; }
  grep -q "stopping during step 1 (its micro-batches so far are dropped" "$dir.log" ||
    { echo "FAIL: no stop message inside step 1"; exit 1; }
else
  [ "$step" -gt 0 ] || { echo "FAIL: checkpoint at step $step"; exit 1; }
  ranks_done=$(grep -c "stopping after step $step" "$dir.log")
  [ "$ranks_done" -ge 1 ] || { echo "FAIL: no stop message for step $step"; exit 1; }
  last=$(tail -n 1 "$dir.jsonl" | sed -n 's/^{"step":\([0-9]*\),.*/\1/p')
  [ "$last" = "$step" ] || { echo "FAIL: the last metrics record is step '$last', the checkpoint's $step"; exit 1; }
fi
end=$((step + 3))
out=$("$mpiexec" "$npflag" 2 "$program" "${args[@]}" --steps "$end" --resume auto 2>&1)
status=$?
echo "$out"
[ "$status" -eq 0 ] || { echo "FAIL: resumed run exited $status"; exit 1; }
echo "$out" | grep -q "resumed from .*$name at step $step" || { echo "FAIL: did not resume from $name"; exit 1; }
echo "$out" | grep -q "done: $end steps" || { echo "FAIL: resumed run did not reach step $end"; exit 1; }
echo "ok: signal $sig to $target -> exit 3, checkpoint at step $step, resumed to $end"
