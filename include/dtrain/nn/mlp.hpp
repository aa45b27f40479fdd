#pragma once
// A multi-layer perceptron classifier (for the C and Fortran apps): Linear layers with GELU
// between them, softmax cross-entropy on the last layer's outputs; optionally split over a
// tensor-parallel group in Megatron's pairs (docs/c-api.md, dt_model_create_mlp_grid).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/nn/layers.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/nn/tensor_parallel.hpp"

namespace dtrain {

struct DTRAIN_API MlpConfig {
  std::vector<int> sizes;  // in, hidden..., out (number of classes); at least two entries
  // Throws Error(Errc::invalid_config).
  void validate() const;
  // That the layers MlpModel splits over a TP group of tp ranks split evenly: the output
  // size of each column-parallel layer (mlp_layer_split) is a multiple of tp.
  void validate_tp(int tp) const;
};

// How layer i of an MLP with `layers` layers is split over a TP group of more than one rank:
// even layers before the last are column-parallel (outputs split; GELU runs on the slice),
// odd layers row-parallel (inputs split; the outputs summed over the group), and a last layer
// that gets the whole input is replicated (computed alike on every rank).
enum class MlpSplit { replicated, column, row };
DTRAIN_API MlpSplit mlp_layer_split(int i, int layers);

class DTRAIN_API MlpModel {
 public:
  // Allocates parameters ("layers.<i>.weight" [sizes[i+1], sizes[i]], "layers.<i>.bias"),
  // gradients and activations for up to max_batch samples; initialises from seed (each
  // tensor's values by logical index, so a split model starts as the whole one). tp: the
  // tensor-parallel group (null: a group of one, every layer whole); it outlives the model,
  // and every rank of it passes the same inputs.
  MlpModel(const MlpConfig& cfg, Device& dev, std::uint64_t seed, int max_batch,
           Communicator* tp = nullptr);
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
  // Accumulates (+=) d(objective)/d(params) given dloss = d(objective)/d(mean loss), of the
  // last forward, which must have had labels: one backward a forward (a second throws).
  void backward(float dloss);
  // Logits of the last forward, device memory [B, classes] (whole on every rank of the TP
  // group); valid until backward().
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
  nn::TpGroup tp_;
  // A layer: the one of the three its split names (a TP group of one: every layer whole).
  struct Layer {
    MlpSplit split = MlpSplit::replicated;
    nn::Linear whole;
    nn::ColumnParallelLinear column;
    nn::RowParallelLinear row;
    int out_local = 0;  // columns of this rank's output (its slice of a column layer's)
  };
  std::vector<Layer> layers_;
  void layer_forward(const Layer& l, float* y, const float* x, int B);
  void layer_backward(const Layer& l, float* dx, const float* dy, const float* x, int B,
                      int in_width);
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
