#!/usr/bin/env bash
# expect_lines.sh REGEX... -- COMMAND...: COMMAND must exit 0 and print (stdout or stderr)
# a line matching each extended regular expression. Its exit status 77 (CTest's skip code,
# where a test sets SKIP_RETURN_CODE 77) is passed on.
set -u
regexes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do regexes+=("$1"); shift; done
shift
out=$("$@" 2>&1)
status=$?
echo "$out"
[ "$status" -eq 77 ] && exit 77
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status"; exit 1; }
for regex in "${regexes[@]}"; do
  echo "$out" | grep -Eq -- "$regex" || { echo "FAIL: no line matches '$regex'"; exit 1; }
done
echo "ok: all ${#regexes[@]} lines printed"
