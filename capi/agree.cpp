#include "agree.hpp"

namespace dtrain::capi {

void share_failure(Communicator& comm, const Outcome& mine, int from, const std::string& prefix) {
  int code = mine.code;
  comm.broadcast(&code, &code, 1, DType::i32, from);
  if (code == DT_SUCCESS) return;
  std::string message = mine.message;
  std::uint64_t n = message.size();
  comm.broadcast(&n, &n, 1, DType::i64, from);
  message.resize(n);
  if (n > 0) comm.broadcast(message.data(), message.data(), n, DType::u8, from);
  fail(static_cast<dt_result_t>(code), prefix + message);
}

bool same_value(Communicator& ranks, std::uint64_t value) {
  std::uint64_t lo = value, hi = value;
  ranks.all_reduce(&lo, &lo, 1, DType::i64, ReduceOp::min);
  ranks.all_reduce(&hi, &hi, 1, DType::i64, ReduceOp::max);
  return lo == hi;
}

void need_same_value(Communicator& ranks, std::uint64_t value, const char* message) {
  if (!same_value(ranks, value)) fail(DT_ERR_INVALID_CONFIG, message);
}

void need_same_lr(Communicator& ranks, float lr) {
  const float value = lr == 0.0f ? 0.0f : lr;  // -0 is 0
  if (!same_value(ranks, fnv1a(&value, sizeof value)))
    fail(DT_ERR_INVALID_ARGUMENT, "the ranks were given different lr: every rank of the step "
                                  "must pass the same one");
}

std::uint64_t optimizer_fingerprint(const dt_optimizer_config_t& o) noexcept {
  const std::uint64_t h = mix(mix(mix(fnv1a(&o.beta1, sizeof o.beta1), o.beta2), o.eps), o.weight_decay);
  return mix(mix(mix(h, o.clip_grad), o.zero_stage), o.bucket_mb);
}

}  // namespace dtrain::capi
