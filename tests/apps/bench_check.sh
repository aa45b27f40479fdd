#!/usr/bin/env bash
# bench_check.sh MPIEXEC NPFLAG NP BENCH: every collective of dtrain-bench at small sizes with
# --check; passes when it exits 0 and every out-of-place and in-place line counts 0 wrong
# elements, over at least 12 lines (4 collectives x 3+ sizes).
set -u
out=$("$1" "$2" "$3" "$4" --op all --min-bytes 64 --max-bytes 64K --step-factor 16 --iters 3 \
      --warmup 1 --check 2>&1)
status=$?
echo "$out"
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status"; exit 1; }
# Data lines: "size count type redop | time algbw busbw wrong | time algbw busbw wrong".
echo "$out" | awk -F'|' '
  !/^#/ && NF == 3 { split($2, a, " "); split($3, b, " "); lines++; if (a[4] != 0 || b[4] != 0) bad++ }
  END { if (lines < 12 || bad > 0) { printf "FAIL: %d lines, %d with wrong elements\n", lines, bad; exit 1 }
        printf "ok: %d lines, no wrong element\n", lines }'
