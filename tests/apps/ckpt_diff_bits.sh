#!/usr/bin/env bash
# ckpt_diff_bits.sh TOOL FILE DIR: two copies of FILE whose /model/wte holds 0 in one and -0
# in the other at the same place (equal values, other bits): `TOOL diff` must call them
# different (exit 1) and count the value, and a copy against itself identical (exit 0).
set -u
tool=$1 file=$2 dir=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" || fail "cannot make $dir"
offset=$("$tool" inspect "$file" | awk '$1 == "/model/wte" { for (i = 1; i < NF; ++i) if ($i == "offset") print $(i + 1) }')
[ -n "$offset" ] || fail "no offset for /model/wte in the inspect output"
at=$((offset + 400))  # the 101st value (float32, little-endian)
cp "$file" "$dir/plus.h5" && cp "$file" "$dir/minus.h5" || fail "cannot copy $file"
printf '\000\000\000\000' | dd of="$dir/plus.h5" bs=1 seek="$at" conv=notrunc status=none
printf '\000\000\000\200' | dd of="$dir/minus.h5" bs=1 seek="$at" conv=notrunc status=none
out=$("$tool" diff "$dir/plus.h5" "$dir/minus.h5" 2>&1)
status=$?
echo "$out"
[ "$status" -eq 1 ] || fail "diff exited $status for files that differ in a sign bit, expected 1"
echo "$out" | grep -Eq "^/model/wte +max_abs_diff 0 \(values equal but stored as other bits: 1;" || fail "diff did not count the -0 in /model/wte"
echo "$out" | tail -n 1 | grep -q "^differ" || fail "diff did not end with 'differ'"
"$tool" diff "$dir/minus.h5" "$dir/minus.h5" > /dev/null 2>&1 || fail "a copy against itself is not identical"
echo "ok: 0 against -0 differs, a copy against itself is identical"
