# make_rank_launcher DIR: writes DIR/in_rank_dir.sh, which runs its arguments in DIR/rN (N:
# the launcher's rank of the process) after sourcing DIR/rN/env.sh if there is one: each rank
# with its own files and environment, as copies staged on node-local disks would be.
make_rank_launcher() {
  cat > "$1/in_rank_dir.sh" <<'SH'
cd "$(dirname "$0")/r${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}" || exit 9
[ -f env.sh ] && source env.sh
exec "$@"
SH
}

# expect_rank1_ended_job STATUS LOG REGEX: the job (exit STATUS, output in LOG) ended with a
# failure whose message rank 1 printed (REGEX, extended, after "ERROR "), not by the watchdog
# or an MPI error of another rank. Prints the log; exits the script on a failed check.
expect_rank1_ended_job() {
  cat "$2"
  [ "$1" -ne 0 ] || { echo "FAIL: exit status 0"; exit 1; }
  grep -Eq "r1/2\] ERROR $3" "$2" || { echo "FAIL: no message from rank 1 matching '$3'"; exit 1; }
  grep -Eq "watchdog|MPI_ERR" "$2" && { echo "FAIL: ended by the watchdog or an MPI error"; exit 1; }
  return 0
}
