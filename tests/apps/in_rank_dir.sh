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
