#!/usr/bin/env bash
# expect_lines.sh REGEX... -- COMMAND...: COMMAND must exit 0 and print (stdout or stderr)
# a line matching each extended regular expression. Its exit status 77 (CTest's skip code,
# where a test sets SKIP_RETURN_CODE 77) is passed on. The output is shown as it comes, so a
# test that times out still shows how far it got.
set -u
regexes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do regexes+=("$1"); shift; done
shift
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 77 ] && exit 77
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status"; exit 1; }
for regex in "${regexes[@]}"; do
  grep -Eq -- "$regex" "$log" || { echo "FAIL: no line matches '$regex'"; exit 1; }
done
echo "ok: all ${#regexes[@]} lines printed"
