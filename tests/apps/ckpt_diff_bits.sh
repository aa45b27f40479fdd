#!/usr/bin/env bash
# ckpt_diff_bits.sh TOOL FILE DIR: two copies of FILE whose /model/wte holds 0 in one and -0
# in the other at the same place (equal values, other bits): `TOOL diff` must call them
# different (exit 1) and count the value, and a copy against itself identical (exit 0). A
# third with a NaN there differs by a count of NaNs against numbers, not by a distance.
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
cp "$file" "$dir/nan.h5" || fail "cannot copy $file"
printf '\000\000\300\177' | dd of="$dir/nan.h5" bs=1 seek="$at" conv=notrunc status=none
out=$("$tool" diff "$dir/plus.h5" "$dir/minus.h5" 2>&1)
status=$?
echo "$out"
[ "$status" -eq 1 ] || fail "diff exited $status for files that differ in a sign bit, expected 1"
echo "$out" | grep -Eq "^/model/wte +max_abs_diff 0 \(values equal but stored as other bits: 1;" || fail "diff did not count the -0 in /model/wte"
echo "$out" | tail -n 1 | grep -q "^differ" || fail "diff did not end with 'differ'"
"$tool" diff "$dir/minus.h5" "$dir/minus.h5" > /dev/null 2>&1 || fail "a copy against itself is not identical"
out=$("$tool" diff "$dir/plus.h5" "$dir/nan.h5" 2>&1)
status=$?
echo "$out"
[ "$status" -eq 1 ] || fail "diff exited $status for files that differ in a NaN, expected 1"
echo "$out" | grep -Eq "^/model/wte +max_abs_diff 0 \(NaN against a number: 1\)$" || fail "diff did not count the NaN in /model/wte"
echo "$out" | grep -q "inf" && fail "diff gave a NaN against a number as a distance"
echo "ok: 0 against -0 differs, a copy against itself is identical, a NaN is counted"
