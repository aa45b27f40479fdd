#!/usr/bin/env bash
# resume_ranks_see_other_files.sh MPIEXEC NPFLAG GPT DIR: two ranks resume "r.h5" from their
# own working directories (nodes with their own copies of a file): where rank 1's copy is
# truncated, has a changed byte in its metadata, or is another model's checkpoint, every rank
# must stop at once (exit 1) with one message naming rank 1, where HDF5's collective open
# and reads used to leave rank 0 waiting for the watchdog.
set -u
mpiexec=$1 np=$2 gpt=$3 dir=$4
fail() { echo "FAIL: $*"; exit 1; }
model=(--layers 1 --d-model 32 --heads 2 --seq-len 16 --eval-every 0)
rm -rf "$dir" && mkdir -p "$dir/w0" "$dir/w1" && cd "$dir" || fail "cannot make $dir"
"$mpiexec" "$np" 1 "$gpt" "${model[@]}" --steps 2 --save-dir a > a.log 2>&1 || { cat a.log; fail "the save failed"; }
"$mpiexec" "$np" 1 "$gpt" --layers 1 --d-model 64 --heads 2 --seq-len 16 --eval-every 0 --steps 2 \
  --save-dir b > b.log 2>&1 || { cat b.log; fail "the other model's save failed"; }
cp a/step_00000002.h5 w0/r.h5
resume() {  # each rank in its own directory
  timeout -k 5 60 "$mpiexec" "$np" 1 bash -c 'cd w0 && exec "$@"' _ "$gpt" "${model[@]}" --steps 3 --resume r.h5 : \
    "$np" 1 bash -c 'cd w1 && exec "$@"' _ "$gpt" "${model[@]}" --steps 3 --resume r.h5 2>&1
}
cp a/step_00000002.h5 w1/r.h5
out=$(resume) || { echo "$out"; fail "the resume from two same copies failed"; }
for copy in truncated byte_300 other_model; do
  case $copy in
    truncated) head -c 100000 a/step_00000002.h5 > w1/r.h5 ;;
    byte_300) cp a/step_00000002.h5 w1/r.h5 && printf '\377' | dd of=w1/r.h5 bs=1 seek=300 conv=notrunc 2>/dev/null ;;
    other_model) cp b/step_00000002.h5 w1/r.h5 ;;
  esac
  out=$(resume)
  status=$?
  [ $status -eq 1 ] || { echo "$out"; fail "$copy: exit $status, expected 1"; }
  n=$(echo "$out" | grep -c "ERROR checkpoint 'r.h5': world rank 1 sees another file than world rank 0")
  [ "$n" -eq 1 ] || { echo "$out"; fail "$copy: the message printed $n times, expected once"; }
  echo "$copy: $(echo "$out" | grep ERROR)"
done
echo "ok: a rank seeing another copy of the checkpoint stops every rank"
