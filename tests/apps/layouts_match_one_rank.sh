#!/usr/bin/env bash
# layouts_match_one_rank.sh MPIEXEC NPFLAG NP GPT: dtrain-gpt, as a user runs it, trains the same
# model on one rank and then in each layout of NP ranks below (data, tensor and pipeline
# parallelism, ZeRO, and their mixes); every logged step's loss and gradient norm, and every
# validation loss, must agree with the one-rank run within 1e-5 relative (bf16 and fp16:
# 1e-4, against one rank in the same precision: a reduced gradient summed in another order
# may round to the neighbouring 16-bit value). Each layout's checkpoint at step 3 is then
# resumed in another layout (16-bit: on one rank), whose steps 4-6 must agree with the
# one-rank run's in the same way.
set -u
mpiexec=$1 npflag=$2 np=$3 gpt=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--layers 4 --d-model 64 --heads 4 --seq-len 32 --vocab 256 --micro-batch 2
        --global-batch 8 --steps 6 --log-every 1 --eval-every 3 --eval-batches 2)

if [ "$np" = 2 ]; then
  layouts=("--zero 0"
           "--zero 1"
           "--zero 3"
           "--tp 2 --sequence-parallel"
           "--pp 2"
           "--pp 2 --schedule gpipe --deterministic"
           "--pp 2 --schedule interleaved --virtual-stages 2 --recompute"
           "--precision bf16 --zero 1")
else
  layouts=("--zero 0"
           "--zero 2"
           "--zero 3"
           "--tp 4 --sequence-parallel"
           "--tp 2 --zero 1 --sequence-parallel"
           "--tp 2 --pp 2"
           "--tp 2 --pp 2 --sequence-parallel --schedule gpipe"
           "--pp 2"
           "--pp 2 --zero 1 --schedule interleaved --virtual-stages 2"
           "--pp 4 --schedule gpipe"
           "--precision bf16 --tp 2 --zero 1"
           "--precision fp16 --zero 1")
fi

run() {  # run NAME NP [OPTIONS...]
  local name=$1 n=$2
  shift 2
  "$mpiexec" "$npflag" "$n" "$gpt" "${common[@]}" "$@" --metrics "$work/$name.jsonl" > "$work/$name.log" 2>&1
  local code=$?
  [ $code = 0 ] || { cat "$work/$name.log"; echo "FAIL: dtrain-gpt $* at $n ranks exited $code"; exit 1; }
}

# compare REFERENCE NAME TOLERANCE FIRST_STEP LABEL: NAME's logged steps FIRST_STEP..6 against
# REFERENCE's.
compare() {
  python3 - "$work/$1.jsonl" "$work/$2.jsonl" "$3" "$4" "$5" <<'PY'
import json, sys
def records(path, first):
    return {r["step"]: r for r in map(json.loads, open(path)) if r["step"] >= first}
first = int(sys.argv[4])
one, split = records(sys.argv[1], first), records(sys.argv[2], 0)
tol, name = float(sys.argv[3]), sys.argv[5]
if sorted(one) != sorted(split) or len(one) != 7 - first:
    sys.exit(f"FAIL {name}: logged steps differ: one rank {sorted(one)}, split {sorted(split)}")
worst, compared = 0.0, 0
for step, r in one.items():
    for key in ("loss", "grad_norm", "val_loss"):
        if (key in r) != (key in split[step]):
            sys.exit(f"FAIL {name}: step {step} has {key} in one run only")
        if key in r:
            gap = abs(split[step][key] - r[key]) / abs(r[key])
            worst, compared = max(worst, gap), compared + 1
            if not gap <= tol:  # a NaN gap fails too
                sys.exit(f"FAIL {name}: step {step} {key} {split[step][key]} against one rank's {r[key]} "
                         f"(relative gap {gap:.3g} > {tol})")
if compared < 2 * len(one):  # every logged step has a loss and a gradient norm
    sys.exit(f"FAIL {name}: {compared} values compared over {len(one)} steps")
print(f"{name}: {compared} losses and norms within {worst:.3g} of one rank (bound {tol})")
PY
}

precision_of() {  # the --precision a layout asks for
  case "$1" in *bf16*) echo bf16 ;; *fp16*) echo fp16 ;; *) echo fp32 ;; esac
}
run fp32 1 --resume none
run bf16 1 --precision bf16 --resume none
[[ " ${layouts[*]} " == *fp16* ]] && run fp16 1 --precision fp16 --resume none
fp32_layouts=()
for i in "${!layouts[@]}"; do
  [ "$(precision_of "${layouts[$i]}")" = fp32 ] && fp32_layouts+=("$i")
done
status=0
for i in "${!layouts[@]}"; do
  read -r -a opts <<< "${layouts[$i]}"
  run "layout$i" "$np" "${opts[@]}" --resume none --save-dir "$work/ckpt$i" --save-every 3
  reference=$(precision_of "${layouts[$i]}") tol=1e-4
  [ $reference = fp32 ] && tol=1e-5
  compare $reference "layout$i" $tol 1 "$np ranks: ${layouts[$i]}" || status=1
  # Its step-3 checkpoint resumed in the next fp32 layout (16-bit: on one rank) trains steps
  # 4-6 as one rank does.
  resumer=(1 --precision $reference)
  if [ $reference = fp32 ]; then
    for k in "${!fp32_layouts[@]}"; do
      [ "${fp32_layouts[$k]}" = "$i" ] && next=${fp32_layouts[$(((k + 1) % ${#fp32_layouts[@]}))]}
    done
    read -r -a resumer <<< "$np ${layouts[$next]}"
  fi
  run "resumed$i" "${resumer[@]}" --resume "$work/ckpt$i/step_00000003.h5"
  compare $reference "resumed$i" $tol 4 "  its step 3 resumed with np=${resumer[0]} ${resumer[*]:1}" ||
    status=1
done
[ "$status" = 0 ] && echo "all layouts match one rank"
exit $status
