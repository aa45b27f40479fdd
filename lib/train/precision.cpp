#include "train/precision.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"

namespace dtrain::train {

DType precision_format(const std::string& precision) {
  if (precision == "fp32") return DType::f32;
  if (precision == "bf16") return DType::bf16;
  if (precision == "fp16") return DType::f16;
  DTRAIN_FAIL(Errc::invalid_config, "--precision must be fp32, bf16 or fp16, got '" << precision << "'");
}

optim::LossScaler make_loss_scaler(const TrainConfig& cfg) {
  if (precision_format(cfg.precision) != DType::f16) return optim::LossScaler();
  optim::LossScalerConfig c;
  c.initial_scale = cfg.loss_scale;
  c.growth_interval = cfg.loss_scale_window;
  c.min_scale = cfg.min_loss_scale;
  c.max_scale = std::max(c.max_scale, cfg.loss_scale);  // a larger initial scale is allowed
  return optim::LossScaler(c);
}

void round_segments(Device& dev, float* buf, const std::vector<optim::Segment>& segments,
                    DType fmt) {
  optim::for_each_contiguous_run(segments, [&](std::size_t offset, std::size_t n, std::size_t) {
    dev.round_to_16bit(buf + offset, buf + offset, static_cast<std::int64_t>(n), fmt);
  });
}

bool segments_nonfinite(Device& dev, const float* buf, const std::vector<optim::Segment>& segments) {
  bool found = false;  // each check waits for the device: one a run, none after a find
  optim::for_each_contiguous_run(segments, [&](std::size_t offset, std::size_t n, std::size_t) {
    found = found || dev.any_nonfinite(buf + offset, static_cast<std::int64_t>(n));
  });
  return found;
}

bool agree_overflow(Communicator& comm, bool local_overflow) {
  int flag = local_overflow ? 1 : 0;
  comm.all_reduce(&flag, &flag, 1, DType::i32, ReduceOp::max);
  return flag != 0;
}

}  // namespace dtrain::train
