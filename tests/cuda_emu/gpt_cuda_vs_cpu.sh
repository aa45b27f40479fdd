#!/usr/bin/env bash
# gpt_cuda_vs_cpu.sh MPIEXEC NP GPT TOLERANCE [OPTIONS...]: trains the same model with
# --device cpu and --device cuda (the emulated plugin, from DTRAIN_CUDA_PLUGIN) on NP ranks
# and requires every logged loss of the two runs to agree within TOLERANCE (relative).
# With OPTIONS containing "resume", the cuda run is split: 3 steps saved to a checkpoint,
# then resumed to the end by a second cuda run. With "nccl", device buffers move over the
# (emulated) NCCL transport instead of MPI staging; with "reorder", the emulator runs every
# other stream's queued work before a stream's own (DTRAIN_CUDA_EMU_OTHER_STREAMS_FIRST); with
# "unfused", attention runs as GEMMs around a softmax (DTRAIN_CUDA_FUSED_ATTENTION=0). Each must
# show in the cuda run's log, so that a setting ignored cannot pass as another run.
# With "generate", both runs then sample 48 tokens (the same random numbers; past seq-len 32,
# so the key/value cache restarts too), and the two texts must be the same. With
# "last-rank-without-vmm", the cuda run's last rank has DTRAIN_CUDA_VMM=0 (a GPU without
# virtual memory management beside ones with it), and rank 0 must warn that 16-bit storage
# (which the test asks for) cannot be had.
set -u
mpiexec=$1 np=$2 gpt=$3 tol=$4
shift 4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--layers 4 --d-model 64 --heads 4 --seq-len 32 --micro-batch 2
        --log-every 1 --eval-every 0 --eval-batches 1)
split=0 transport=mpi_staged generate=0 last_without_vmm=0
opts=() in_cuda_log=()  # lines the cuda run must log: a setting that took effect
for o in "$@"; do
  case "$o" in
    resume) split=1 ;;
    generate) generate=1; opts+=(--generate 48 --prompt ab) ;;
    nccl) transport=nccl ;;
    reorder) export DTRAIN_CUDA_EMU_OTHER_STREAMS_FIRST=1; in_cuda_log+=("other streams' queued work runs first") ;;
    unfused) export DTRAIN_CUDA_FUSED_ATTENTION=0; in_cuda_log+=("GEMMs, attention unfused)") ;;
    last-rank-without-vmm) last_without_vmm=1 ;;
    *) opts+=("$o") ;;
  esac
done
export DTRAIN_DEVICE_COMM=$transport
# A vocabulary of 256 unless the options give one (131 leaves padding rows in every shard)
[[ " ${opts[*]} " == *" --vocab "* ]] || common+=(--vocab 256)

run() {  # run DEVICE STEPS [EXTRA...]
  local dev=$1 steps=$2 status
  shift 2
  local args=("${common[@]}" "${opts[@]}" --device "$dev" --steps "$steps"
              --metrics "$work/$dev.jsonl" "$@")
  if [ "$dev" = cuda ] && [ "$last_without_vmm" = 1 ]; then
    "$mpiexec" -n $((np - 1)) "$gpt" "${args[@]}" : -n 1 env DTRAIN_CUDA_VMM=0 "$gpt" "${args[@]}" \
      > "$work/$dev.out" 2> "$work/$dev.log"
  else
    "$mpiexec" -n "$np" "$gpt" "${args[@]}" > "$work/$dev.out" 2> "$work/$dev.log"
  fi
  status=$?
  [ "$status" -eq 0 ] || { cat "$work/$dev.log"; echo "FAIL: --device $dev exited $status"; exit 1; }
}

run cpu 6 --resume none
if [ "$split" = 1 ]; then
  run cuda 3 --save-dir "$work/ckpt" --save-every 3 --resume none
  run cuda 6 --save-dir "$work/ckpt" --resume auto
  grep -q "resumed from" "$work/cuda.log" || { cat "$work/cuda.log"; echo "FAIL: no resume"; exit 1; }
else
  run cuda 6 --resume none
fi
grep "device cuda" "$work/cuda.log" | head -1
if [ "$np" -gt 1 ] && ! grep -q "device buffers move over $transport" "$work/cuda.log"; then
  cat "$work/cuda.log"; echo "FAIL: device buffers did not move over $transport"; exit 1
fi

for line in "${in_cuda_log[@]}"; do
  grep -qF -- "$line" "$work/cuda.log" || { cat "$work/cuda.log"; echo "FAIL: the cuda run did not log: $line"; exit 1; }
done

if [ "$last_without_vmm" = 1 ] && ! grep -q -- "--param-storage 16bit: the parameters stay" "$work/cuda.log"; then
  cat "$work/cuda.log"; echo "FAIL: no warning about the rank without virtual memory management"; exit 1
fi

if [ "$generate" = 1 ]; then
  echo "generated on the cpu:  $(cat "$work/cpu.out")"
  echo "generated on the cuda: $(cat "$work/cuda.out")"
  # 48 tokens print at least a byte each (an empty generation would compare equal too)
  [ "$(wc -c <"$work/cpu.out")" -ge 48 ] || { echo "FAIL: fewer than 48 tokens printed"; exit 1; }
  cmp -s "$work/cpu.out" "$work/cuda.out" || { echo "FAIL: the generated texts differ"; exit 1; }
fi

python3 - "$work/cpu.jsonl" "$work/cuda.jsonl" "$tol" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path))}
cpu, cuda, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if sorted(cpu) != sorted(cuda) or not cpu:
    sys.exit(f"FAIL: logged steps differ: cpu {sorted(cpu)} cuda {sorted(cuda)}")
worst = max(abs(cuda[s] - cpu[s]) / abs(cpu[s]) for s in cpu)
for s in sorted(cpu):
    print(f"step {s}: cpu {cpu[s]:.7f} cuda {cuda[s]:.7f}")
print(f"worst relative difference {worst:.3g} (bound {tol:g})")
sys.exit(0 if worst <= tol else "FAIL: the losses differ")
PY
