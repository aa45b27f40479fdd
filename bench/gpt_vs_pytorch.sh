#!/usr/bin/env bash
# Side-by-side: dtrain-gpt vs a PyTorch DDP (gloo) equivalent, same model, batch and optimiser,
# 2 ranks, one thread per rank, in one run. Needs Debian's python3-torch and a built tree.
#   bench/gpt_vs_pytorch.sh [build-dir]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
PYTHON="${PYTHON:-/usr/bin/python3}"  # Debian python3-torch lives in the system Python
RANKS="${RANKS:-2}"
STEPS="${STEPS:-20}"
MODEL=(--layers 4 --heads 4 --d-model 256 --seq-len 256 --vocab 256 --micro-batch 8)
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

metrics="$(mktemp)"
mpiexec -n "$RANKS" "$BUILD/apps/dtrain-gpt/dtrain-gpt" "${MODEL[@]}" --steps "$STEPS" \
  --log-every 1 --eval-every 0 --eval-batches 1 --metrics "$metrics" 2>&1 | grep -E "peak|done" || true
dtrain_tps=$(python3 - "$metrics" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]  # skip warm-up steps
tps = sorted(r["tokens_per_s"] for r in rows)
mfu = sorted(r["mfu"] for r in rows)
print(f"{tps[len(tps)//2]:.1f} {mfu[len(mfu)//2]:.3f}")
PY
)
rm -f "$metrics"
read -r dtps dmfu <<<"$dtrain_tps"
# Plain processes with the env:// rendezvous on loopback (Debian's torchrun wrapper is not
# needed and fails with some Python builds).
torch_out="$(mktemp)"
for ((r = 0; r < RANKS; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$RANKS MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29531} \
    "$PYTHON" "$ROOT/bench/torch_gpt.py" --layers 4 --heads 4 --d-model 256 --seq-len 256 \
    --vocab 256 --micro-batch 8 --steps "$STEPS" >>"$torch_out" 2>&1 &
done
wait
torch_line=$(grep tokens_per_s "$torch_out")
rm -f "$torch_out"
ttps=$(echo "$torch_line" | awk '{print $4}')
echo "dtrain   tokens/s $dtps  (mfu vs measured SGEMM peak: $dmfu)"
echo "$torch_line"
python3 -c "print(f'ratio dtrain/pytorch: {float($dtps)/float($ttps):.2f}x')"
