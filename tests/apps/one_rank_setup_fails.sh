#!/usr/bin/env bash
# one_rank_setup_fails.sh MPIEXEC NPFLAG PROGRAM DIR
# A 2-rank start where rank 1 alone fails, as a node with its own copy of a file or its own
# environment would: (1) its --config file is missing (the command line is read by each rank
# alone, before any collective); (2) a DTRAIN_* setting read in the middle of the set-up is
# malformed there only, while rank 0 waits for it in the set-up's collectives; (3) a variable
# read when MPI starts (DTRAIN_LOG_LEVEL) is malformed there only. Each must end the job with
# rank 1's message, not a hang until the watchdog or another rank's MPI error.
set -u
mpiexec=$1 npflag=$2 program=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir/r0" "$dir/r1"
printf 'layers = 1\nd-model = 32\nheads = 2\nseq-len = 16\nmicro-batch = 2\nsteps = 2\neval-every = 0\n' > "$dir/r0/run.ini"
source "$(dirname "$0")/in_rank_dir.sh"
make_rank_launcher "$dir"
run() {  # run NAME ARGS...: the job's status, its output in $dir/NAME.log
  local name=$1
  shift
  "$mpiexec" "$npflag" 2 bash "$dir/in_rank_dir.sh" "$program" "$@" > "$dir/$name.log" 2>&1
}
run missing_config --config run.ini
status=$?
cat "$dir/missing_config.log"
[ "$status" -eq 2 ] || { echo "FAIL: missing config: exit status $status, expected 2"; exit 1; }
[ "$(grep -c "ERROR cannot read --config file 'run.ini'" "$dir/missing_config.log")" -eq 1 ] ||
  { echo "FAIL: missing config: not one message naming the file"; exit 1; }

cp "$dir/r0/run.ini" "$dir/r1/run.ini"
echo "export DTRAIN_PEAK_FLOPS=abc" > "$dir/r1/env.sh"
start=$(date +%s)
run bad_setting --config run.ini
status=$?
seconds=$(( $(date +%s) - start ))
expect_rank1_ended_job "$status" "$dir/bad_setting.log" ".*DTRAIN_PEAK_FLOPS"
echo "export DTRAIN_LOG_LEVEL=bogus" > "$dir/r1/env.sh"
run bad_start --config run.ini
status=$?
cat "$dir/bad_start.log"
[ "$status" -eq 2 ] || { echo "FAIL: bad start: exit status $status, expected 2"; exit 1; }
grep -q "r0/2\] ERROR DTRAIN_LOG_LEVEL='bogus' is not a log level .*(in world rank 1's environment)" "$dir/bad_start.log" ||
  { echo "FAIL: bad start: rank 0 did not report rank 1's variable"; exit 1; }
echo "ok: each ended with rank 1's message (the second after $seconds s)"
