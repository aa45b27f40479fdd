#pragma once
// A GPT's weights read from a file (dtrain-gpt --init-from and the C ABI's
// dt_model_load_weights, docs/dtrain-gpt.md), e.g. a fresh run's instead of the seed's:
//  - a safetensors file: Hugging Face's GPT-2 (names with or without "transformer.", the four
//    linear layers' weights [in, out] as its Conv1D keeps them), or one whose linear weights
//    are [out, in] (dtrain-ckpt export, nanoGPT); the layout is told by c_attn's shape. A
//    directory stands for its model.safetensors (a Hugging Face snapshot);
//  - a dtrain checkpoint, of which only the /model tensors are taken (not the optimiser's
//    state or the step: the run starts at step 0).
// Each rank reads, whole, the tensors it holds, so any layout starts from the same values.
#include <memory>
#include <string>

#include "dtrain/export.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/nn/parameters.hpp"

namespace dtrain::ckpt {

class DTRAIN_API InitialWeights {
 public:
  // Opens path and compares the model it holds with `model`: layers, d-model, vocabulary, a
  // separate LM head, at least seq_len positions (a longer wpe gives its first rows), and
  // the head count where the file records it (a dtrain checkpoint or export; a Hugging Face
  // config.json next to a safetensors file, whose activation and LayerNorm settings must be
  // GPT-2's too). Errc::invalid_config names what the file holds and the options that would
  // fit it; Errc::io or Errc::corrupt_data for a file that cannot be read as one. Messages
  // begin with `caller` and the path ("--init-from 'gpt2/model.safetensors' ...").
  InitialWeights(const std::string& path, const GptConfig& model, const std::string& caller = "--init-from");
  ~InitialWeights();
  InitialWeights(const InitialWeights&) = delete;
  InitialWeights& operator=(const InitialWeights&) = delete;

  // Every tensor of params (this rank's) is in the file with its shape; nothing is read.
  void check_shapes(const ParameterStore& params) const;
  // The whole logical tensor p (p.logical_numel() floats), valid until another is asked for.
  // Read when first asked for and checked: every value finite, a checkpoint's checksum
  // right, and for a tied model's wte a file's lm_head.weight, if it has one, equal to it.
  // Errors as the constructor's.
  const float* values(const ParamInfo& p);
  // The file and what it holds, for the log: "'gpt2.safetensors' (safetensors, Hugging
  // Face GPT-2 layout): 12 layers, d-model 768, ...".
  std::string describe() const;
  // Whether the file records its head count (which no tensor's shape shows).
  bool records_heads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::ckpt
