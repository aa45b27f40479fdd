#!/usr/bin/env bash
# resume_piece_reads_other_bytes.sh MPIEXEC NPFLAG GPT DIR: the last pipeline stage's copy
# of the tied wte, split into ZeRO pieces over its data-parallel ranks, is read by no rank
# whole: a rank there that reads other bytes than the file's (here a bit it flips after
# reading, the test hook) must still fail the resume on every rank. Saved at one rank,
# resumed at four (pp 2 x dp 2, ZeRO 1) with each of the last stage's ranks flipping.
set -u
mpiexec=$1 np=$2 gpt=$3 dir=$4
fail() { echo "FAIL: $*"; exit 1; }
model=(--layers 2 --d-model 32 --heads 2 --seq-len 16 --vocab 1024 --micro-batch 2 --log-every 1)
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || fail "cannot make $dir"
"$mpiexec" "$np" 1 "$gpt" "${model[@]}" --steps 4 --save-dir s --save-every 4 > save.log 2>&1 ||
  { cat save.log; fail "the save run failed"; }
resume=("$mpiexec" "$np" 4 "$gpt" "${model[@]}" --steps 5 --pp 2 --zero 1 --resume s/step_00000004.h5)
"${resume[@]}" > clean.log 2>&1 || { cat clean.log; fail "the resume without a flip failed"; }
# refused RANK DATASET [OPTIONS]: that rank flips a value of DATASET; the resume must stop
# (exit 1) with the checksum failure over the copies (printed once, by rank 0).
refused() {
  local rank=$1 dataset=$2
  shift 2
  out=$(DTRAIN_TEST_CKPT_FLIP_READ_RANK=$rank DTRAIN_TEST_CKPT_FLIP_READ_DATASET=$dataset "${resume[@]}" "$@" 2>&1)
  status=$?
  [ "$status" -eq 1 ] || { echo "$out"; fail "rank $rank flipping $dataset $*: exit $status, expected 1"; }
  echo "$out" | grep -q "ERROR .*dataset $dataset fails its checksum over the 2 copies the ranks read" ||
    { echo "$out"; fail "rank $rank flipping $dataset $*: not refused as expected"; }
}
for rank in 2 3; do
  refused $rank /optimizer/wte/exp_avg
  refused $rank /optimizer/wte/exp_avg_sq
done
# In bf16 the parameters load from the fp32 masters, in pieces too.
refused 2 /model/wte --precision bf16
echo "ok: a flipped piece of the last stage's tied wte on rank 2 or 3 stops every rank"
