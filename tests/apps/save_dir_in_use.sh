#!/usr/bin/env bash
# save_dir_in_use.sh MPIEXEC NPFLAG GPT CONFIG DIR: while one run trains with --save-dir DIR,
# a second run with the same directory must fail at start-up (status 1) naming the first,
# and leave the first's checkpoints alone; once the first has ended the directory is free.
set -u
mpiexec=$1 npflag=$2 gpt=$3 config=$4 dir=$5
rm -rf "$dir"
mkdir -p "$dir"
fail() { echo "FAIL: $*"; exit 1; }

"$mpiexec" "$npflag" 1 "$gpt" --config "$config" --steps 1000000 --log-every 100000 --eval-every 0 \
  --save-dir "$dir" --save-every 1000000 > "$dir.first.log" 2>&1 &
first=$!
source "$(dirname "$0")/ranks_of.sh"
name=$(basename "$gpt")
trap 'kill -KILL $(ranks_of "$first" "$name") "$first" 2>/dev/null' EXIT
source "$(dirname "$0")/wait_for_training.sh"
wait_for_training "$dir.first.log" || { cat "$dir.first.log"; fail "the first run did not start training"; }
sleep 1
grep -q "^process" "$dir/.dtrain-lock" 2>/dev/null || fail "the first run did not claim $dir"
holder=$(head -n 1 "$dir/.dtrain-lock")

out=$("$mpiexec" "$npflag" 2 "$gpt" --config "$config" --steps 2 --save-dir "$dir" 2>&1)
status=$?
echo "$out"
[ "$status" -eq 1 ] || fail "the second run exited with $status, expected 1"
echo "$out" | grep -Fq "checkpoint directory '$dir' is in use by another run ($holder" ||
  fail "the second run's error does not name the first ($holder)"
[ "$(echo "$out" | grep -c "is in use by another run")" -eq 1 ] || fail "the error is not printed once"
ls "$dir"/step_*.h5 2>/dev/null && fail "the refused run wrote a checkpoint"

ranks=$(ranks_of "$first" "$name")
[ -n "$ranks" ] || fail "no rank of the first run found under process $first"
kill -USR1 $ranks  # the run saves and exits with status 3
wait "$first"
status=$?
[ "$status" -eq 3 ] || fail "the first run exited with $status when stopped, expected 3"
ls "$dir"/step_*.h5 > /dev/null || fail "the first run saved nothing when stopped"
"$mpiexec" "$npflag" 2 "$gpt" --config "$config" --steps 2 --save-dir "$dir" --resume none ||
  fail "the directory is still claimed after the first run ended"
echo "ok: a busy save dir is refused and freed"
