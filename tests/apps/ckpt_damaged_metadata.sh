#!/usr/bin/env bash
# ckpt_damaged_metadata.sh TOOL FILE COPY: flips one bit at a time in the file's first
# metadata (the root group's header follows the 48-byte superblock) of a copy of FILE;
# `TOOL verify` must refuse each copy with status 1 or 2 and one line, and nothing from HDF5
# itself (which printed "HDF5: infinite loop closing library" at exit after such a read).
set -u
source "$(dirname "$0")/flip_bits.sh"
tool=$1 file=$2 copy=$3
fail() { echo "FAIL: $*"; exit 1; }
refused=0
for at in $(seq 48 4 140); do
  cp "$file" "$copy" || fail "cannot copy $file"
  flip_bits "$copy" "$at" 1
  out=$("$tool" verify "$copy" 2>&1)
  status=$?
  [ "$status" -le 2 ] || fail "verify exited $status after a flip at byte $at: $out"
  [ "$status" -eq 0 ] && continue  # a bit HDF5 does not read for this
  refused=$((refused + 1))
  lines=$(printf '%s\n' "$out" | wc -l)
  [ "$lines" -eq 1 ] || fail "a flip at byte $at: $lines lines, expected one message: $out"
  case $out in *HDF5:*) fail "a flip at byte $at: HDF5's own output: $out" ;; esac
done
[ "$refused" -gt 0 ] || fail "no flip between bytes 48 and 140 was refused"
echo "ok: $refused flips refused with one message each"
