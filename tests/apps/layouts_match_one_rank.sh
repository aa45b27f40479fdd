#!/usr/bin/env bash
# layouts_match_one_rank.sh MPIEXEC NPFLAG NP GPT: dtrain-gpt, as a user runs it, trains the same
# model on one rank and then in each layout of NP ranks below (data, tensor and pipeline
# parallelism, ZeRO, and their mixes); every logged step's loss and gradient norm, and every
# validation loss, must agree with the one-rank run within 1e-5 relative (bf16: 1e-4, against
# one rank in bf16).
set -u
mpiexec=$1 npflag=$2 np=$3 gpt=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--layers 4 --d-model 64 --heads 4 --seq-len 32 --vocab 256 --micro-batch 2
        --global-batch 8 --steps 6 --log-every 1 --eval-every 3 --eval-batches 2 --resume none)

if [ "$np" = 2 ]; then
  layouts=("--zero 3"
           "--tp 2 --sequence-parallel"
           "--pp 2"
           "--pp 2 --schedule interleaved --virtual-stages 2"
           "--precision bf16 --zero 1")
else
  layouts=("--zero 2"
           "--tp 4 --sequence-parallel"
           "--tp 2 --zero 1 --sequence-parallel"
           "--tp 2 --pp 2"
           "--pp 2 --zero 1 --schedule interleaved --virtual-stages 2"
           "--pp 4 --schedule gpipe"
           "--precision bf16 --tp 2 --zero 1")
fi

run() {  # run NAME NP [OPTIONS...]
  local name=$1 n=$2
  shift 2
  "$mpiexec" "$npflag" "$n" "$gpt" "${common[@]}" "$@" --metrics "$work/$name.jsonl" > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; echo "FAIL: dtrain-gpt $* at $n ranks exited $?"; exit 1; }
}

run fp32 1
run bf16 1 --precision bf16
status=0
for i in "${!layouts[@]}"; do
  read -r -a opts <<< "${layouts[$i]}"
  run "layout$i" "$np" "${opts[@]}"
  reference=fp32 tol=1e-5
  case "${layouts[$i]}" in *bf16*) reference=bf16 tol=1e-4 ;; esac
  python3 - "$work/$reference.jsonl" "$work/layout$i.jsonl" "$tol" "$np ranks: ${layouts[$i]}" <<'PY' || status=1
import json, sys
def records(path):
    return {r["step"]: r for r in map(json.loads, open(path))}
one, split, tol, name = records(sys.argv[1]), records(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
if sorted(one) != sorted(split) or len(one) != 6:
    sys.exit(f"FAIL {name}: logged steps differ: one rank {sorted(one)}, split {sorted(split)}")
worst, compared = 0.0, 0
for step, r in one.items():
    for key in ("loss", "grad_norm", "val_loss"):
        if (key in r) != (key in split[step]):
            sys.exit(f"FAIL {name}: step {step} has {key} in one run only")
        if key in r:
            gap = abs(split[step][key] - r[key]) / abs(r[key])
            worst, compared = max(worst, gap), compared + 1
            if gap > tol:
                sys.exit(f"FAIL {name}: step {step} {key} {split[step][key]} against one rank's {r[key]} "
                         f"(relative gap {gap:.3g} > {tol})")
print(f"{name}: {compared} losses and norms within {worst:.3g} of one rank (bound {tol})")
PY
done
[ "$status" = 0 ] && echo "all layouts match one rank"
exit $status
