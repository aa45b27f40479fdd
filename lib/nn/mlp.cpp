// MLP classifier: Linear (+GELU) stack and softmax cross-entropy, through Device ops; over a
// TP group, column- and row-parallel layers in pairs.
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
  double count = 0;  // weights and biases
  for (std::size_t i = 0; i + 1 < sizes.size(); ++i)
    count += (static_cast<double>(sizes[i]) + 1) * static_cast<double>(sizes[i + 1]);
  DTRAIN_CHECK(count <= 0x1p50, Errc::invalid_config,
               "the MLP would have " << count << " parameters: more than 2^50, beyond any machine's memory");
}

MlpSplit mlp_layer_split(int i, int layers) {
  if (i % 2 == 1) return MlpSplit::row;
  return i + 1 < layers ? MlpSplit::column : MlpSplit::replicated;
}

void MlpConfig::validate_tp(int tp) const {
  DTRAIN_CHECK(tp >= 1, Errc::invalid_config, "tensor-parallel size must be positive, got " << tp);
  const int layers = static_cast<int>(sizes.size()) - 1;
  for (int i = 0; tp > 1 && i < layers; ++i)
    DTRAIN_CHECK(mlp_layer_split(i, layers) != MlpSplit::column || sizes[i + 1] % tp == 0,
                 Errc::invalid_config,
                 "MLP size " << i + 1 << " (" << sizes[i + 1]
                             << ", the output of column-parallel layer " << i
                             << ") must be divisible by the tensor-parallel size (" << tp << ")");
}

MlpModel::MlpModel(const MlpConfig& cfg, Device& dev, std::uint64_t seed, int max_batch,
                   Communicator* tp)
    : cfg_(cfg), dev_(&dev), max_batch_(max_batch), params_(dev), tp_(tp, dev) {
  cfg_.validate();
  cfg_.validate_tp(tp_.size());
  DTRAIN_CHECK(max_batch > 0, Errc::invalid_config, "batch must be positive, got " << max_batch);
  const int L = static_cast<int>(cfg_.sizes.size()) - 1;
  layers_.resize(L);
  for (int i = 0; i < L; ++i) {
    Layer& l = layers_[i];
    const std::string name = "layers." + std::to_string(i);
    const int in = cfg_.sizes[i], out = cfg_.sizes[i + 1];
    l.split = tp_.size() > 1 ? mlp_layer_split(i, L) : MlpSplit::replicated;
    l.out_local = out;
    if (l.split == MlpSplit::column) {
      l.column.declare(params_, name, in, out, tp_);
      l.out_local = l.column.out_local;
    } else if (l.split == MlpSplit::row) {
      l.row.declare(params_, name, in, out, tp_);
    } else {
      l.whole.declare(params_, name, in, out);
    }
  }
  params_.allocate();
  // LeCun-normal weights N(0, 1/sqrt(fan_in)) keep activations O(1) through the GELUs; biases 0.
  for (int i = 0; i < L; ++i) {
    Layer& l = layers_[i];
    params_.init_normal(params_.at("layers." + std::to_string(i) + ".weight"), seed, 0.0f,
                        static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg_.sizes[i]))));
    if (l.split == MlpSplit::column)
      l.column.bind(params_);
    else if (l.split == MlpSplit::row)
      l.row.bind(params_);
    else
      l.whole.bind(params_);
  }

  // activations: one allocation carved into 64-byte-aligned pieces; a layer's output has
  // this rank's columns only (out_local)
  const std::size_t B = static_cast<std::size_t>(max_batch);
  auto round = [](std::size_t n) { return (n + 15) / 16 * 16; };
  int widest = 0;
  for (const Layer& l : layers_) widest = std::max(widest, l.out_local);
  std::size_t total = round(B * cfg_.sizes[0]) + round(B) * 4 + round(B * widest);
  for (int i = 0; i < L; ++i) total += round(B * layers_[i].out_local) * (i + 1 < L ? 3 : 1);
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
    pre_.push_back(take(B * layers_[i].out_local));
    if (i + 1 < L) {
      acts_.push_back(take(B * layers_[i].out_local));
      dacts_.push_back(take(B * layers_[i].out_local));  // gradient w.r.t. acts_[i+1]
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
  DTRAIN_CHECK(x != nullptr, Errc::invalid_argument, "MlpModel::forward: x is null");
  check_inputs(labels, B);
  const int classes = cfg_.sizes.back();
  Device& d = *dev_;
  d.copy(acts_[0], x, sizeof(float) * static_cast<std::size_t>(B) * cfg_.sizes[0],
         CopyKind::host_to_device);
  const int L = static_cast<int>(layers_.size());
  for (int i = 0; i < L; ++i) {
    layer_forward(layers_[i], pre_[i], acts_[i], B);
    if (i + 1 < L)
      d.gelu_forward(acts_[i + 1], pre_[i], static_cast<std::int64_t>(B) * layers_[i].out_local);
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
               "backward() needs a forward() with labels first (one backward a forward: the "
               "loss's gradient overwrites the logits)");
  have_labels_ = false;  // consumed: a second backward would read gradients as logits
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
    const int in_width = i > 0 ? layers_[i - 1].out_local : cfg_.sizes[0];
    layer_backward(layers_[i], dinp, dout, acts_[i], B, in_width);
    if (i > 0) {
      const std::int64_t n = static_cast<std::int64_t>(B) * in_width;
      d.gelu_backward(dpre_, pre_[i - 1], dinp, n, overwrite);
      dout = dpre_;
    }
  }
}

void MlpModel::layer_forward(const Layer& l, float* y, const float* x, int B) {
  switch (l.split) {
    case MlpSplit::column:  // x whole; y this rank's columns
      l.column.forward(*dev_, y, x, B);
      break;
    case MlpSplit::row:  // x this rank's columns; y the sum over the group
      l.row.forward(*dev_, y, x, B);
      tp_.all_reduce(y, static_cast<std::size_t>(B) * static_cast<std::size_t>(l.row.out));
      break;
    case MlpSplit::replicated:
      l.whole.forward(*dev_, y, x, B);
      break;
  }
}

// dy as forward's y; dx (null for the input data) written over, as forward's x.
void MlpModel::layer_backward(const Layer& l, float* dx, const float* dy, const float* x, int B,
                              int in_width) {
  constexpr Device::GradWrite overwrite = Device::GradWrite::overwrite;
  switch (l.split) {
    case MlpSplit::column:  // this rank's part of the whole input's gradient: summed
      l.column.backward(*dev_, dx, dy, x, B, overwrite);
      if (dx) tp_.all_reduce(dx, static_cast<std::size_t>(B) * static_cast<std::size_t>(in_width));
      break;
    case MlpSplit::row:
      l.row.backward(*dev_, dx, dy, x, B, overwrite);
      break;
    case MlpSplit::replicated:
      l.whole.backward(*dev_, dx, dy, x, B, overwrite);
      break;
  }
}

double MlpModel::flops_per_sample() const noexcept {
  double w = 0;
  for (std::size_t i = 0; i + 1 < cfg_.sizes.size(); ++i)
    w += static_cast<double>(cfg_.sizes[i]) * cfg_.sizes[i + 1];
  return 6.0 * w;
}

}  // namespace dtrain
