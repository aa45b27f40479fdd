#!/usr/bin/env bash
# data_shrinks.sh MPIEXEC NPFLAG PROGRAM DIR
# A 2-rank run whose text data file is emptied while it trains: the run must end promptly
# with a message naming the file, with neither a SIGBUS nor a hang (the ranks meet the short
# read at different moments, so the first one ends the job).
set -u
mpiexec=$1 npflag=$2 program=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir"
data=$dir/text.txt
seq 1 20000 > "$data"
"$mpiexec" "$npflag" 2 "$program" --layers 1 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 \
  --log-every 1000000 --eval-every 0 --steps 100000000 --data "$data" > "$dir/log" 2>&1 &
pid=$!
trap 'kill -TERM "$pid" 2> /dev/null' EXIT
source "$(dirname "$0")/wait_for_training.sh"
wait_for_training "$dir/log" || { cat "$dir/log"; echo "FAIL: the run did not start training"; exit 1; }
sleep 0.5
: > "$data"
wait "$pid"
status=$?
trap - EXIT
cat "$dir/log"
[ "$status" -ne 0 ] || { echo "FAIL: exit status 0"; exit 1; }
grep -qi "bus error\|signal 7" "$dir/log" && { echo "FAIL: a bus error"; exit 1; }
grep -q "reading data file '$data' at byte [0-9]*: the file is shorter than the [0-9]* bytes" "$dir/log" ||
  { echo "FAIL: no message naming the shrunk file"; exit 1; }
echo "ok: exit status $status with the file named"
