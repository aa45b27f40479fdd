#!/usr/bin/env bash
# refused_run_leaves_no_dir.sh MPIEXEC NPFLAG GPT WORK: a 2-rank run refused at start-up (a
# --resume file that does not exist, one that is not a checkpoint) leaves no trace of the
# --save-dir it would have made (two levels here) or of its --metrics file, and a directory
# or metrics file that was there stays; a run that saves keeps what it made.
set -u
mpiexec=$1 npflag=$2 gpt=$3 work=$4
rm -rf "$work" && mkdir -p "$work/existing" || exit 1
echo "not HDF5" > "$work/junk.h5"
tiny=(--layers 1 --d-model 32 --heads 2 --seq-len 16 --steps 2 --eval-every 0)

refused() {  # refused SAVE_DIR RESUME [METRICS]
  "$mpiexec" "$npflag" 2 "$gpt" "${tiny[@]}" --save-dir "$1" --resume "$2" --metrics "${3:-$work/m.jsonl}" > "$work/out.log" 2>&1
  local status=$?
  [ $status = 1 ] || { cat "$work/out.log"; echo "FAIL: exit status $status, expected 1"; exit 1; }
}

refused "$work/new/ckpt" "$work/none.h5"
[ -e "$work/new" ] && { ls -laR "$work/new"; echo "FAIL: the refused run left $work/new"; exit 1; }
refused "$work/new/ckpt/" "$work/junk.h5"
[ -e "$work/new" ] && { ls -laR "$work/new"; echo "FAIL: the refused run left $work/new (given with a trailing /)"; exit 1; }
[ -e "$work/m.jsonl" ] && { echo "FAIL: the refused run left its metrics file"; exit 1; }
echo "earlier line" > "$work/earlier.jsonl"
refused "$work/existing" "$work/none.h5" "$work/earlier.jsonl"
refused "$work/existing" "$work/junk.h5" "$work/earlier.jsonl"
[ -d "$work/existing" ] || { echo "FAIL: a directory that was there before went"; exit 1; }
[ "$(cat "$work/earlier.jsonl")" = "earlier line" ] || { echo "FAIL: a metrics file that was there changed"; exit 1; }
"$mpiexec" "$npflag" 2 "$gpt" "${tiny[@]}" --save-dir "$work/saved/ckpt" --resume none --metrics "$work/m.jsonl" > "$work/out.log" 2>&1 ||
  { cat "$work/out.log"; echo "FAIL: the run that saves failed"; exit 1; }
[ -f "$work/saved/ckpt/step_00000002.h5" ] || { ls -laR "$work/saved"; echo "FAIL: no checkpoint"; exit 1; }
grep -q "\"step\":2" "$work/m.jsonl" || { echo "FAIL: the run that saves did not keep its metrics line"; exit 1; }
echo "ok: refused runs left nothing behind"
