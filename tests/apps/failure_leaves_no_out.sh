#!/usr/bin/env bash
# failure_leaves_no_out.sh MPIEXEC NPFLAG PROGRAM FILE: an example program whose --out FILE is
# tried at start-up (writable) but whose run then fails (a damaged --resume file) exits 1 and
# leaves no FILE behind: the start-up try removes the file it made.
set -u
mpiexec=$1 npflag=$2 program=$3 out=$4
rm -f "$out"
echo "not a checkpoint" > "$out.bad.h5"
"$mpiexec" "$npflag" 2 "$program" --steps 3 --resume "$out.bad.h5" --out "$out" > "$out.log" 2>&1
status=$?
cat "$out.log"
[ "$status" -eq 1 ] || { echo "FAIL: exit status $status, expected 1"; exit 1; }
[ ! -e "$out" ] || { echo "FAIL: the failed run left $out behind"; exit 1; }
echo "ok: failed, no --out file left"
