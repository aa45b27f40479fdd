#!/usr/bin/env bash
# ckpt_bitflip.sh TOOL FILE COPY: flips the lowest bit of one byte inside /model/wte's data
# in a copy of FILE; `TOOL verify` must then fail (exit 1) naming /model/wte, and `TOOL
# export` refuse it (exit 2) without writing anything.
set -u
source "$(dirname "$0")/flip_bits.sh"
tool=$1 file=$2 copy=$3
fail() { echo "FAIL: $*"; exit 1; }
cp "$file" "$copy" || fail "cannot copy $file"
# inspect prints "offset N" for each dataset: the byte where its data starts.
offset=$("$tool" inspect "$copy" | awk '$1 == "/model/wte" { for (i = 1; i < NF; ++i) if ($i == "offset") print $(i + 1) }')
[ -n "$offset" ] || fail "no offset for /model/wte in the inspect output"
at=$((offset + 100))
flip_bits "$copy" "$at" 1
out=$("$tool" verify "$copy" 2>&1)
status=$?
echo "$out"
[ "$status" -eq 1 ] || fail "verify exited $status on a bit-flipped file, expected 1"
echo "$out" | grep -q "dataset /model/wte fails its checksum" || fail "verify did not name /model/wte"
rm -f "$copy.st"
out=$("$tool" export "$copy" "$copy.st" 2>&1)
status=$?
echo "$out"
[ "$status" -eq 2 ] || fail "export exited $status on a bit-flipped file, expected 2"
echo "$out" | grep -q "dataset /model/wte fails its checksum" || fail "export did not name /model/wte"
[ -z "$(ls "$copy".st* 2>/dev/null)" ] || fail "export left a file: $(ls "$copy".st*)"
echo "ok: bit flip at byte $at refused by verify and export, naming /model/wte"
