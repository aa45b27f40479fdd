#!/usr/bin/env bash
# one_rank_setup_fails.sh MPIEXEC NPFLAG PROGRAM DIR ADDRESS_LIMIT_KB (none: skip case 4)
# A 2-rank start where rank 1 alone fails, as a node with its own copy of a file or its own
# environment would: (1) its --config file is missing (the command line is read by each rank
# alone, before any collective); (2) and (3) a DTRAIN_* variable (DTRAIN_PEAK_FLOPS, which the
# set-up uses late; DTRAIN_LOG_LEVEL) is malformed there only: every rank reads them when MPI
# starts, together; (4) rank 1's memory (ulimit -v) is too small for the model, found inside the
# set-up while rank 0 goes on into its collectives: rank 1 waits half DTRAIN_COMM_TIMEOUT for
# the others, then ends the job itself. Each must end the job with rank 1's message, not a
# hang until the watchdog or another rank's MPI error.
set -u
mpiexec=$1 npflag=$2 program=$3 dir=$4 address_limit=${5:-none}
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
start=$(date +%s)
for setting in "DTRAIN_PEAK_FLOPS=abc|DTRAIN_PEAK_FLOPS='abc' is not a number" \
               "DTRAIN_LOG_LEVEL=bogus|DTRAIN_LOG_LEVEL='bogus' is not a log level"; do
  echo "export ${setting%%|*}" > "$dir/r1/env.sh"
  run bad_start --config run.ini
  status=$?
  cat "$dir/bad_start.log"
  [ "$status" -eq 2 ] || { echo "FAIL: ${setting%%|*}: exit status $status, expected 2"; exit 1; }
  [ "$(grep -c "r0/2\] ERROR ${setting#*|} .*(in world rank 1's environment)" "$dir/bad_start.log")" -eq 1 ] ||
    { echo "FAIL: ${setting%%|*}: rank 0 did not report rank 1's variable once"; exit 1; }
done
seconds=$(( $(date +%s) - start ))
# (each took over 20 s when one rank alone read DTRAIN_PEAK_FLOPS in the set-up)
[ "$seconds" -lt 30 ] || { echo "FAIL: the two bad settings took $seconds s to end their jobs"; exit 1; }

# (4): 1.5 GB of address space, where a process with one thread of each kind (kernels,
# OpenBLAS, OpenMP; one malloc arena) needs about 0.4 GB and the model's activations 1.6 GB
# more (mapped, not touched, on rank 0).
if [ "$address_limit" = none ]; then
  echo "ok: each ended with rank 1's message (the two settings in $seconds s; no address-space case)"
  exit 0
fi
echo "ulimit -v $address_limit" > "$dir/r1/env.sh"
start=$(date +%s)
DTRAIN_COMM_TIMEOUT=12 DTRAIN_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MALLOC_ARENA_MAX=1 \
  run out_of_memory --config run.ini --layers 2 --d-model 256 --heads 4 --seq-len 1024 --micro-batch 32
status=$?
oom_seconds=$(( $(date +%s) - start ))
expect_rank1_ended_job $status "$dir/out_of_memory.log" \
  "cannot map [0-9]+ bytes \([0-9.]+ GiB\) of host memory: Cannot allocate memory, setting up the model.*--micro-batch"
[ "$oom_seconds" -lt 30 ] || { echo "FAIL: the rank out of memory took $oom_seconds s to end the job"; exit 1; }
echo "ok: each ended with rank 1's message (the two settings in $seconds s, the memory in $oom_seconds s)"
