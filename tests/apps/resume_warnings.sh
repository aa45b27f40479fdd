#!/usr/bin/env bash
# resume_warnings.sh GPT DIR OPTIONS [PYTHON]: a resume with other settings than the run it continues
# says each kind of change once (the samples drawn, the learning-rate schedule, the clipping,
# AdamW's settings, the global batch, other contents under the data's path or files moved
# between training and validation, an fp16 run's
# --loss-scale), numbers in their
# shortest form; the same data under another spelling of its path or in a copy, and a resume
# that trains nothing (the checkpoint at --steps), say nothing of it.
set -u
gpt=$1 dir=$2 options=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" || fail "cannot make $dir"
cd "$dir" || fail "cannot enter $dir"
printf 'the quick brown fox jumps over the lazy dog\n%.0s' $(seq 200) > corpus.txt
# shellcheck disable=SC2086
"$gpt" $options --data corpus.txt --steps 2 --save-dir ckpt > first.log 2>&1 || fail "first run: $(cat first.log)"
once() {  # once LOG TEXT: TEXT on exactly one line of LOG
  [ "$(grep -cF -- "$2" "$1")" -eq 1 ] || fail "expected one line with '$2' in: $(cat "$1")"
}
# shellcheck disable=SC2086
"$gpt" $options --data "$dir/./corpus.txt" --steps 3 --save-dir ckpt --resume auto --seed 5 --lr 0.001 \
  --clip-grad 0 --weight-decay 0 > changed.log 2>&1 || fail "resume: $(cat changed.log)"
once changed.log "written by a run with seed = 1337, this run has 5: from here on it draws other samples"
once changed.log "another learning-rate schedule (lr 0.003 -> 0.001, steps 2 -> 3)"
once changed.log "other gradient clipping (clip-grad 1 -> 0)"
once changed.log "other AdamW settings (weight_decay 0.1 -> 0)"
grep -q "data = " changed.log && fail "the same file under another path was taken for other data: $(cat changed.log)"
[ "$(grep -c WARN changed.log)" -eq 4 ] || fail "expected 4 warnings: $(cat changed.log)"
# shellcheck disable=SC2086
"$gpt" $options --data corpus.txt --steps 3 --save-dir ckpt --resume auto --seed 7 --lr 0.002 \
  > nothing.log 2>&1 || fail "resume at --steps: $(cat nothing.log)"
once nothing.log "nothing to train"
grep -q WARN nothing.log && fail "warnings from a resume that trains nothing: $(cat nothing.log)"
# Another global batch (4 sequences, the first runs' 8): step 3 starts at sample 12, not 24.
# shellcheck disable=SC2086
"$gpt" $options --data corpus.txt --steps 4 --save-dir ckpt --resume auto --seed 5 --lr 0.001 \
  --clip-grad 0 --weight-decay 0 --micro-batch 4 > batch.log 2>&1 || fail "resume at another batch: $(cat batch.log)"
once batch.log "was at sample 24; at this run's global batch of 4 sequences step 3 starts at sample 12: samples 12..23 are drawn again"
once batch.log "another learning-rate schedule (steps 3 -> 4)"
[ "$(grep -c WARN batch.log)" -eq 2 ] || fail "expected 2 warnings: $(cat batch.log)"
# Other contents under the same path are other data; a copy of the first under another name is not.
cp corpus.txt copy.txt
printf 'pack my box with five dozen liquor jugs\n%.0s' $(seq 200) > corpus.txt
# shellcheck disable=SC2086
"$gpt" $options --data corpus.txt --steps 5 --save-dir ckpt --resume auto --seed 5 --lr 0.001 \
  --clip-grad 0 --weight-decay 0 --micro-batch 4 > contents.log 2>&1 || fail "resume on other contents: $(cat contents.log)"
once contents.log "was written by a run whose data files (training or validation) had other contents"
[ "$(grep -c WARN contents.log)" -eq 2 ] || fail "expected 2 warnings (contents, steps): $(cat contents.log)"
# shellcheck disable=SC2086
"$gpt" $options --data copy.txt --steps 6 --save-dir ckpt --resume ckpt/step_00000004.h5 --seed 5 --lr 0.001 \
  --clip-grad 0 --weight-decay 0 --micro-batch 4 > copy.log 2>&1 || fail "resume on a copy: $(cat copy.log)"
[ "$(grep -c WARN copy.log)" -eq 1 ] || fail "expected 1 warning (steps): $(cat copy.log)"
# The same files split otherwise: a validation file moved into the training files.
head -c 4000 copy.txt > part_a.txt && tail -c 4000 copy.txt > part_b.txt
# shellcheck disable=SC2086
"$gpt" $options --data part_a.txt --val-data part_b.txt --steps 1 --save-dir ckpt_split > split1.log 2>&1 ||
  fail "run with --val-data: $(cat split1.log)"
# shellcheck disable=SC2086
"$gpt" $options --data part_a.txt,part_b.txt --steps 2 --save-dir ckpt_split > split2.log 2>&1 ||
  fail "resume with the validation file trained on: $(cat split2.log)"
once split2.log "had other contents, or were split otherwise between training and validation"
# A file from before data_fingerprint (removed with h5py, where PYTHON has it): the paths decide,
# as the files they name: DIR/./corpus.txt is the corpus.txt that wrote it (whose contents
# changed since, which the paths cannot tell), copy.txt is not.
python=${4:-}
if [ -n "$python" ] && "$python" -c "import h5py" 2> /dev/null; then
  cp ckpt/step_00000004.h5 old.h5
  "$python" -c "import h5py; f = h5py.File('old.h5', 'r+'); del f.attrs['data_fingerprint']; f.close()" ||
    fail "cannot remove data_fingerprint"
  # shellcheck disable=SC2086
  "$gpt" $options --data "$dir/./corpus.txt" --steps 5 --save-dir ckpt_old --resume old.h5 --seed 5 --lr 0.001 \
    --clip-grad 0 --weight-decay 0 --micro-batch 4 > old_same.log 2>&1 || fail "resume from the old file: $(cat old_same.log)"
  [ "$(grep -c WARN old_same.log)" -eq 1 ] || fail "expected 1 warning (steps): $(cat old_same.log)"
  # shellcheck disable=SC2086
  "$gpt" $options --data copy.txt --steps 5 --save-dir ckpt_old2 --resume old.h5 --seed 5 --lr 0.001 \
    --clip-grad 0 --weight-decay 0 --micro-batch 4 > old_other.log 2>&1 || fail "resume from the old file: $(cat old_other.log)"
  once old_other.log "written by a run with data = 'corpus.txt', this run has 'copy.txt'"
else
  echo "no h5py: the case of a file without data_fingerprint is not checked"
fi
# Seeds are compared exactly (two past 2^53 that one double holds are two seeds).
# shellcheck disable=SC2086
"$gpt" $options --steps 1 --save-dir ckpt_seed --seed 9007199254740992 > seed.log 2>&1 || fail "seed run: $(cat seed.log)"
# shellcheck disable=SC2086
"$gpt" $options --steps 2 --save-dir ckpt_seed --resume auto --seed 9007199254740993 > seed2.log 2>&1 ||
  fail "seed resume: $(cat seed2.log)"
once seed2.log "written by a run with seed = 9007199254740992, this run has 9007199254740993"
# The built-in corpus, then files: other samples, with no "the same data under another path".
# shellcheck disable=SC2086
"$gpt" $options --steps 3 --save-dir ckpt_seed --resume auto --seed 9007199254740993 --data copy.txt > corpus.log 2>&1 ||
  fail "resume on files: $(cat corpus.log)"
once corpus.log "data = '' (the built-in corpus), this run has 'copy.txt': from here on it draws other samples than the run it continues would have"
grep -q "unless it is the same data" corpus.log && fail "the built-in corpus taken for files under another path: $(cat corpus.log)"
# fp16: the saved dynamic loss scale goes on, whatever --loss-scale says.
# shellcheck disable=SC2086
"$gpt" $options --precision fp16 --steps 2 --save-dir ckpt16 > fp16.log 2>&1 || fail "fp16 run: $(cat fp16.log)"
# shellcheck disable=SC2086
"$gpt" $options --precision fp16 --save-dir ckpt16 --resume auto --loss-scale 1024 --steps 3 \
  > scale.log 2>&1 || fail "fp16 resume: $(cat scale.log)"
once scale.log "holds the dynamic loss scale 65536, which goes on: this run's --loss-scale 1024 sets the scale of a fresh run only"
echo "ok: each change said once"
