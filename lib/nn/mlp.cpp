// MLP classifier: Linear (+GELU) stack and softmax cross-entropy, through Device ops.
#include "dtrain/nn/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "dtrain/core/error.hpp"

namespace dtrain {

void MlpConfig::validate() const {
  DTRAIN_CHECK(sizes.size() >= 2, Errc::invalid_config,
               "an MLP needs at least an input and an output size, got " << sizes.size()
                                                                         << " sizes");
  for (std::size_t i = 0; i < sizes.size(); ++i)
    DTRAIN_CHECK(sizes[i] > 0, Errc::invalid_config,
                 "MLP size " << i << " must be positive, got " << sizes[i]);
  DTRAIN_CHECK(sizes.back() >= 2, Errc::invalid_config,
               "an MLP classifier needs at least 2 classes, got " << sizes.back());
}

MlpModel::MlpModel(const MlpConfig& cfg, Device& dev, std::uint64_t seed, int max_batch)
    : cfg_(cfg), dev_(&dev), max_batch_(max_batch), params_(dev) {
  cfg_.validate();
  DTRAIN_CHECK(max_batch > 0, Errc::invalid_config, "batch must be positive, got " << max_batch);
  const int L = static_cast<int>(cfg_.sizes.size()) - 1;
  layers_.resize(L);
  for (int i = 0; i < L; ++i)
    layers_[i].declare(params_, "layers." + std::to_string(i), cfg_.sizes[i], cfg_.sizes[i + 1]);
  params_.allocate();
  // LeCun-normal weights N(0, 1/sqrt(fan_in)) keep activations O(1) through the GELUs; biases 0.
  for (int i = 0; i < L; ++i) {
    params_.init_normal(params_.at(layers_[i].prefix + ".weight"), seed, 0.0f,
                        static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg_.sizes[i]))));
    layers_[i].bind(params_);
  }

  // activations: one allocation carved into 64-byte-aligned pieces
  const std::size_t B = static_cast<std::size_t>(max_batch);
  auto round = [](std::size_t n) { return (n + 15) / 16 * 16; };
  int widest = 0;
  for (int s : cfg_.sizes) widest = std::max(widest, s);
  std::size_t total = round(B * cfg_.sizes[0]) + round(B) * 4 + round(B * widest);
  for (int i = 0; i < L; ++i) total += round(B * cfg_.sizes[i + 1]) * (i + 1 < L ? 3 : 1);
  act_bytes_ = total * sizeof(float);
  act_buf_ = DeviceBuffer(dev, act_bytes_);
  float* p = act_buf_.as<float>();
  auto take = [&](std::size_t n) {
    float* r = p;
    p += round(n);
    return r;
  };
  acts_.push_back(take(B * cfg_.sizes[0]));
  for (int i = 0; i < L; ++i) {
    pre_.push_back(take(B * cfg_.sizes[i + 1]));
    if (i + 1 < L) {
      acts_.push_back(take(B * cfg_.sizes[i + 1]));
      dacts_.push_back(take(B * cfg_.sizes[i + 1]));  // gradient w.r.t. acts_[i+1]
    } else {
      acts_.push_back(pre_.back());  // logits
    }
  }
  labels_ = reinterpret_cast<std::int32_t*>(take(B));
  losses_ = take(B);
  lse_ = take(B);
  dlosses_ = take(B);
  dpre_ = take(B * widest);
  host_losses_.resize(B);
}

MlpModel::~MlpModel() = default;

void MlpModel::check_inputs(const std::int32_t* labels, int B) const {
  DTRAIN_CHECK(B > 0 && B <= max_batch_, Errc::invalid_argument,
               "batch " << B << " outside [1, " << max_batch_ << "]");
  const int classes = cfg_.sizes.back();
  if (labels)
    for (int i = 0; i < B; ++i)
      DTRAIN_CHECK(labels[i] >= 0 && labels[i] < classes, Errc::invalid_argument,
                   "label " << labels[i] << " of sample " << i << " outside [0, " << classes
                            << ")");
}

float MlpModel::forward(const float* x, const std::int32_t* labels, int B) {
  check_inputs(labels, B);
  const int classes = cfg_.sizes.back();
  Device& d = *dev_;
  d.copy(acts_[0], x, sizeof(float) * static_cast<std::size_t>(B) * cfg_.sizes[0],
         CopyKind::host_to_device);
  const int L = static_cast<int>(layers_.size());
  for (int i = 0; i < L; ++i) {
    layers_[i].forward(d, pre_[i], acts_[i], B);
    if (i + 1 < L)
      d.gelu_forward(acts_[i + 1], pre_[i], static_cast<std::int64_t>(B) * cfg_.sizes[i + 1]);
  }
  last_B_ = B;
  have_labels_ = labels != nullptr;
  if (!labels) return 0.0f;
  d.copy(labels_, labels, sizeof(std::int32_t) * B, CopyKind::host_to_device);
  d.crossentropy_forward(losses_, lse_, pre_.back(), labels_, B, classes, classes);
  d.copy(host_losses_.data(), losses_, sizeof(float) * B, CopyKind::device_to_host);
  double sum = 0;
  for (int i = 0; i < B; ++i) sum += host_losses_[i];
  return static_cast<float>(sum / B);
}

void MlpModel::backward(float dloss) {
  DTRAIN_CHECK(have_labels_, Errc::invalid_argument,
               "backward() needs a forward() with labels first");
  Device& d = *dev_;
  const int B = last_B_, classes = cfg_.sizes.back();
  const int L = static_cast<int>(layers_.size());
  d.fill(dlosses_, dloss / static_cast<float>(B), B);
  // dlogits overwrite the logits in place; then walk the layers down. dpre_ holds the
  // gradient w.r.t. the current layer's linear output.
  d.crossentropy_backward(pre_.back(), pre_.back(), lse_, labels_, dlosses_, B, classes, classes);
  // Each activation gradient has one producer, which writes it over.
  constexpr Device::GradWrite overwrite = Device::GradWrite::overwrite;
  const float* dout = pre_.back();
  for (int i = L - 1; i >= 0; --i) {
    float* dinp = i > 0 ? dacts_[i - 1] : nullptr;  // no gradient w.r.t. the input data
    layers_[i].backward(d, dinp, dout, acts_[i], B, overwrite);
    if (i > 0) {
      const std::int64_t n = static_cast<std::int64_t>(B) * cfg_.sizes[i];
      d.gelu_backward(dpre_, pre_[i - 1], dinp, n, overwrite);
      dout = dpre_;
    }
  }
}

double MlpModel::flops_per_sample() const noexcept {
  double w = 0;
  for (std::size_t i = 0; i + 1 < cfg_.sizes.size(); ++i)
    w += static_cast<double>(cfg_.sizes[i]) * cfg_.sizes[i + 1];
  return 6.0 * w;
}

}  // namespace dtrain
