#!/usr/bin/env bash
# resume_warnings.sh GPT DIR OPTIONS: a resume with other settings than the run it continues
# says each kind of change once (the samples drawn, the learning-rate schedule, the clipping,
# AdamW's settings), numbers in their shortest form; the same data under another spelling of
# its path and a resume that trains nothing (the checkpoint at --steps) say nothing.
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
echo "ok: each change said once"
