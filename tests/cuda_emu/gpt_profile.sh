#!/usr/bin/env bash
# gpt_profile.sh MPIEXEC GPT: trains two steps on the (emulated) GPU with DTRAIN_CUDA_PROFILE=1
# and requires the table of GPU time by op at exit: its header, and a row with calls for
# each kind of op a step runs (GEMMs, attention, LayerNorm, GELU, loss, optimiser). Then the
# same under --precision bf16, whose attention is the fused kernels (rows of their own).
set -u
mpiexec=$1 gpt=$2

# profile_has ATTENTION_OPS [OPTION...]: a run with the options shows every op's row.
profile_has() {
  local attention=$1
  shift
  local log status
  log=$(DTRAIN_CUDA_PROFILE=1 "$mpiexec" -n 1 "$gpt" --device cuda --layers 1 --d-model 32 \
          --heads 2 --seq-len 16 --vocab 256 --micro-batch 2 --steps 2 --eval-every 0 "$@" 2>&1)
  status=$?
  echo "$log"
  [ $status = 0 ] || { echo "FAIL: dtrain-gpt $* exited with $status"; exit 1; }
  grep -Eq "GPU time by op on cuda:0 .*: [0-9.]+ ms in [0-9]+ ops, [0-9.]+% of the" <<<"$log" ||
    { echo "FAIL: no profile header"; exit 1; }
  for op in linear_forward linear_backward ${attention}_forward ${attention}_backward \
            layernorm_forward layernorm_backward gelu_forward crossentropy_forward adamw; do
    grep -Eq "^  $op +[1-9][0-9]* +[0-9.]+ +[0-9.]+% +[0-9.]+$" <<<"$log" ||
      { echo "FAIL: no profile row for $op${*:+ ($*)}"; exit 1; }
  done
}

profile_has attention
profile_has flash_attention --precision bf16
echo "profile complete"
