#!/usr/bin/env bash
# expect_status.sh CODE REGEX COMMAND...: COMMAND must exit with CODE and print (stdout or
# stderr) a line matching the extended regular expression REGEX.
set -u
code=$1 regex=$2
shift 2
out=$("$@" 2>&1)
status=$?
echo "$out"
[ "$status" -eq "$code" ] || { echo "FAIL: exit status $status, expected $code"; exit 1; }
echo "$out" | grep -Eq -- "$regex" || { echo "FAIL: no line matches '$regex'"; exit 1; }
echo "ok: exit $code and output matches"
