#!/usr/bin/env bash
# gpt_profile.sh MPIEXEC GPT: trains two steps on the (emulated) GPU with DTRAIN_CUDA_PROFILE=1
# and requires the table of GPU time by op at exit: its header, and a row with calls for
# each kind of op a step runs (GEMMs, attention, LayerNorm, GELU, loss, optimiser), whose
# work columns (GFLOP, GB) hold what this model's shapes give per call. Then the same under
# --precision bf16, whose attention is the fused kernels (rows of their own).
set -u
mpiexec=$1 gpt=$2

# profile_has ATTENTION_OPS [OPTION...]: a run with the options (its output in $log) shows
# every op's row.
profile_has() {
  local attention=$1
  shift
  local status
  log=$(DTRAIN_CUDA_PROFILE=1 "$mpiexec" -n 1 "$gpt" --device cuda --layers 1 --d-model 32 \
          --heads 2 --seq-len 16 --vocab 256 --micro-batch 2 --steps 2 --eval-every 0 "$@" 2>&1)
  status=$?
  echo "$log"
  [ $status = 0 ] || { echo "FAIL: dtrain-gpt $* exited with $status"; exit 1; }
  grep -Eq "GPU time by op on cuda:0 .*: [0-9.]+ ms in [0-9]+ ops, [0-9.]+% of the" <<<"$log" ||
    { echo "FAIL: no profile header"; exit 1; }
  for op in linear_forward linear_backward ${attention}_forward ${attention}_backward \
            layernorm_forward layernorm_backward gelu_forward crossentropy_forward adamw; do
    grep -Eq "^  $op +[1-9][0-9]* +[0-9.]+ +[0-9.]+% +[0-9.]+( +([0-9.e+-]+|-)){4}$" <<<"$log" ||
      { echo "FAIL: no profile row for $op${*:+ ($*)}"; exit 1; }
  done
}

# work_is OP COLUMN PER_CALL: the column (6: GFLOP, 8: GB) of OP's row is PER_CALL (flops or
# bytes) times its calls, to 1e-5 relative (the table prints 6 digits).
work_is() {
  awk -v op="$1" -v col="$2" -v per_call="$3" '
    $1 == op { found = 1; want = $2 * per_call / 1e9; got = $col
               if (got < want * (1 - 1e-5) || got > want * (1 + 1e-5)) {
                 printf "FAIL: %s column %d is %s, want %.6g\n", op, col, got, want; exit 1 } }
    END { if (!found) { print "FAIL: no row for " op; exit 1 } }' <<<"$log" || exit 1
}

# One layer, C = 32 (hs 16), T = 16, micro-batch 2 (N = 32 rows), vocabulary 256, tied head.
N=32 C=32 T=16 V=256
profile_has attention
# linear_forward's four calls per layer (C->3C, C->C, C->4C, 4C->C) multiply 2 N C 12C
# together, linear_backward twice that (dinp and dweight) in those four calls and one for
# the LM head (dx and dW, 2 N C V each); the head's logits are a GEMM of 2 N C V; attention
# multiplies the full T x T square, 2 products forward.
work_is linear_forward 6 $((2 * N * C * 12 * C / 4))
work_is linear_backward 6 $(((2 * 2 * N * C * 12 * C + 2 * 2 * N * C * V) / 5))
work_is gemm 6 $((2 * N * C * V))
work_is attention_forward 6 $((2 * (C / 2) * T * T * 2 * 2 * 2))
work_is gelu_forward 8 $((4 * 2 * N * 4 * C))      # read and written once
# the projections' GEMMs add the residual stream themselves at one rank: no pass of its own
! grep -Eq "^  residual_forward " <<<"$log" || { echo "FAIL: a residual_forward pass ran"; exit 1; }
profile_has flash_attention --precision bf16
# the fused kernels take whole 64 x 64 blocks on and below the diagonal: one here (T = 16);
# 2 products forward, 7 backward
work_is flash_attention_forward 6 $((2 * (C / 2) * 64 * 64 * 2 * 2 * 2))
work_is flash_attention_backward 6 $((2 * (C / 2) * 64 * 64 * 7 * 2 * 2))
# with 16-bit saved activations the backward reads dout and writes dqkv as 16-bit words for
# the GEMMs around it (attention_backward_rounded): of its fp32 count (dout, qkv, dqkv, out:
# 8 C floats a row, and 2 saved floats a row and head), 2 bytes less for each of 4 C a row
work_is flash_attention_backward 8 $((4 * (N * 8 * C + 2 * 2 * N) - 2 * N * 4 * C))
echo "profile complete"
