#!/usr/bin/env bash
# one_rank_fails.sh MPIEXEC NPFLAG PROGRAM DIR
# Each of 2 ranks reads its own copy of a token shard (its own working directory, as copies
# staged to node-local disks are), and rank 1's holds token 60000 wherever the copies'
# fingerprints do not look: the start-up checks pass, rank 1 alone fails inside the step
# loop, and the job must end at once with its message, not wait for the watchdog while rank
# 0 waits in a collective.
set -u
mpiexec=$1 npflag=$2 program=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir/r0" "$dir/r1"
python3 - "$dir" <<'PY'
import struct, sys
n = 20000
seen = set()  # the 64 runs of 64 tokens the fingerprint reads
for r in range(64):
    start = (n - 64) * r // 63
    seen.update(range(start, start + 64))
good = [t % 100 for t in range(n)]
bad = [t if i in seen else 60000 for i, t in enumerate(good)]
for sub, tokens in (("r0", good), ("r1", bad)):
    with open(f"{sys.argv[1]}/{sub}/d.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack(f"<{n}H", *tokens))
PY
source "$(dirname "$0")/in_rank_dir.sh"
make_rank_launcher "$dir"
start=$(date +%s)
"$mpiexec" "$npflag" 2 bash "$dir/in_rank_dir.sh" "$program" --layers 1 --d-model 32 --heads 2 \
  --seq-len 16 --micro-batch 2 --vocab 100 --steps 1000 --eval-every 0 --data d.bin > "$dir/log" 2>&1
status=$?
seconds=$(( $(date +%s) - start ))
expect_rank1_ended_job "$status" "$dir/log" "data file 'd.bin' holds token 60000 at token [0-9]*, outside --vocab 100"
echo "ok: exit status $status after $seconds s with rank 1's message"
