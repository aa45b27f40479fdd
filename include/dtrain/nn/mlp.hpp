#pragma once
// A multi-layer perceptron classifier (for the C and Fortran apps): Linear layers with GELU
// between them, softmax cross-entropy on the last layer's outputs.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/nn/layers.hpp"
#include "dtrain/nn/parameters.hpp"

namespace dtrain {

struct DTRAIN_API MlpConfig {
  std::vector<int> sizes;  // in, hidden..., out (number of classes); at least two entries
  // Throws Error(Errc::invalid_config).
  void validate() const;
};

class DTRAIN_API MlpModel {
 public:
  // Allocates parameters ("layers.<i>.weight" [sizes[i+1], sizes[i]], "layers.<i>.bias"),
  // gradients and activations for up to max_batch samples; initialises from seed.
  MlpModel(const MlpConfig& cfg, Device& dev, std::uint64_t seed, int max_batch);
  ~MlpModel();
  MlpModel(const MlpModel&) = delete;
  MlpModel& operator=(const MlpModel&) = delete;

  ParameterStore& parameters() noexcept { return params_; }
  const ParameterStore& parameters() const noexcept { return params_; }

  // x: host [B, in] floats; labels: host [B] int32 in [0, classes) or null (inference).
  // Returns the mean cross-entropy over B (0 without labels).
  float forward(const float* x, const std::int32_t* labels, int B);
  // forward()'s argument checks on their own (batch size, labels in range; labels may be
  // null): Error(Errc::invalid_argument). For callers that must agree on them first.
  void check_inputs(const std::int32_t* labels, int B) const;
  // Accumulates (+=) d(objective)/d(params) given dloss = d(objective)/d(mean loss).
  void backward(float dloss);
  // Logits of the last forward, device memory [B, classes]; valid until backward().
  const float* logits() const noexcept { return acts_.back(); }

  std::size_t activation_bytes() const noexcept { return act_bytes_; }
  double flops_per_sample() const noexcept;  // forward + backward: 6 * weights
  const MlpConfig& config() const noexcept { return cfg_; }
  int max_batch() const noexcept { return max_batch_; }

 private:
  MlpConfig cfg_;
  Device* dev_;
  int max_batch_;
  ParameterStore params_;
  std::vector<nn::Linear> layers_;
  DeviceBuffer act_buf_;
  std::size_t act_bytes_ = 0;
  // acts_[0] = input; for layer i: pre_[i] = linear output; acts_[i+1] = gelu(pre_[i]) except
  // for the last layer, whose output (the logits) is acts_.back() == pre_.back().
  std::vector<float*> acts_, pre_, dacts_;
  std::int32_t* labels_ = nullptr;
  float *losses_ = nullptr, *lse_ = nullptr, *dlosses_ = nullptr, *dpre_ = nullptr;
  std::vector<float> host_losses_;
  int last_B_ = 0;
  bool have_labels_ = false;
};

}  // namespace dtrain
