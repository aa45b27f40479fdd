#!/usr/bin/env bash
# ckpt_damaged_links.sh TOOL DIR GPT...: GPT... (dtrain-gpt) writes a small checkpoint FILE
# in DIR; then one bit at a time is flipped in the first 900 bytes of each block that holds
# names (a large group keeps its links', and attributes', in a fractal heap's direct blocks,
# which start with the signature FHDB) of a copy of FILE. `TOOL diff FILE COPY` and `TOOL
# verify COPY` must each end within 20 s with a status of at most 2: HDF5 1.10 freed garbage
# (a crash) when such damage met a listing in increasing name order after another file had
# been read (diff's second file). This model's file crashed that way (flips at 169510 and
# later, every run); others' did not, as the crash depends on what the heap held before.
set -u
source "$(dirname "$0")/flip_bits.sh"
tool=$1 dir=$2
shift 2
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" || fail "cannot make $dir"
file=$dir/ckpt/step_00000002.h5 copy=$dir/damaged.h5
"$@" --layers 2 --heads 2 --d-model 32 --seq-len 16 --micro-batch 8 --steps 2 --eval-every 0 \
  --save-dir "$dir/ckpt" --resume none >"$dir/write.log" 2>&1 || { cat "$dir/write.log"; fail "no checkpoint written"; }
blocks=$(grep -obUa FHDB "$file" | cut -d: -f1)
[ -n "$blocks" ] || fail "no fractal heap direct block (FHDB) in $file"
size=$(stat -c %s "$file")
flips=0 noticed=0
for block in $blocks; do
  for at in $(seq $((block + 8)) 29 $((block + 900))); do
    [ "$at" -lt "$size" ] || break
    cp "$file" "$copy" || fail "cannot copy $file"
    flip_bits "$copy" "$at" 16
    flips=$((flips + 1))
    for command in diff verify; do
      if [ "$command" = diff ]; then
        out=$(timeout 20 "$tool" diff "$file" "$copy" 2>&1)
      else
        out=$(timeout 20 "$tool" verify "$copy" 2>&1)
      fi
      status=$?
      [ "$status" -le 2 ] || fail "$command exited $status after a flip at byte $at: $out"
      [ "$status" -eq 0 ] || noticed=$((noticed + 1))  # refused, or (diff) found a difference
    done
  done
done
[ "$noticed" -gt 0 ] || fail "none of $flips flips in the name blocks was noticed"
echo "ok: $flips flips in the name blocks, $noticed commands noticed them, none crashed"
