#pragma once
// The tensors a checkpoint holds: every logical tensor of the model exactly once, in the
// same order on every rank. With pipeline parallelism each stage's arena holds only some of
// them, so the list is gathered over the pipeline group; a tensor held by several stages
// (the last stage's copy of a tied wte) is listed once, with the first stage holding it,
// whose copy is the one written.
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/nn/parameters.hpp"

namespace dtrain::ckpt {

struct TensorEntry {
  std::string name;                 // global name, e.g. "h.3.attn.c_attn.weight"
  std::vector<std::int64_t> shape;  // logical shape
  int first_stage = 0;              // lowest pipeline stage that holds it: its writer
};

// "name d0 d1 ...\n" per parameter in registration order: one stage's part of the list.
std::string describe_stage(const ParameterStore& params);

// The directory from every stage's description (index = pipeline stage): stage 0's tensors,
// then each later stage's new ones. A name listed by two stages with different shapes is
// Errc::internal.
std::vector<TensorEntry> merge_stages(const std::vector<std::string>& stages);

// Collective over pp (the pipeline group: one rank per stage): the directory of the whole
// model, identical on every rank of the job.
std::vector<TensorEntry> gather_directory(Communicator& pp, const ParameterStore& params);

}  // namespace dtrain::ckpt
