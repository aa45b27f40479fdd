#pragma once
// What a dt_model_t points to: a built-in model (MLP or GPT), its layout over the ranks, its
// optimiser step and, from the first save or load on, its checkpoint I/O.
#include <memory>

#include "checkpoints.hpp"
#include "dtrain/comm/process_grid.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/nn/mlp.hpp"
#include "guard.hpp"
#include "handles.hpp"
#include "step_engine.hpp"

struct dt_model_s : dtrain::capi::CommUser {
  explicit dt_model_s(dt_comm_s* c) : CommUser(dtrain::capi::Kind::model, c) {}
  // On a GPU: the group the model was made over (dp, or a grid's world) over a device
  // transport; empty on the CPU. Declared first so that it outlives what uses it.
  dtrain::Communicator device_group;
  // A model made on a grid: its TP and DP groups, split from device_group or the grid's world.
  std::unique_ptr<dtrain::ProcessGrid> layout;
  std::unique_ptr<dtrain::MlpModel> mlp;
  std::unique_ptr<dtrain::GptModel> gpt;
  std::unique_ptr<dtrain::capi::StepEngine> engine;
  std::unique_ptr<dtrain::capi::Checkpoints> checkpoints;  // made at the first save or load

  dtrain::ParameterStore& params() { return mlp ? mlp->parameters() : gpt->parameters(); }
  dtrain::Device& device() { return params().device(); }
  // The data-parallel group the steps average over.
  dtrain::Communicator& dp() {
    if (layout) return layout->dp();
    return device_group.valid() ? device_group : *comm->comm;
  }
  // The tensor-parallel group of a model split over several ranks; null otherwise.
  dtrain::Communicator* tp() { return layout && layout->tp_size() > 1 ? &layout->tp() : nullptr; }
  // Every rank of the model (TP x DP): where the arguments of a collective call are agreed.
  dtrain::Communicator& group() { return layout ? layout->world() : dp(); }
  dtrain::capi::Checkpoints& checkpoint_io();
};

namespace dtrain::capi {

// The entry-point shape for a model handle (see call() in guard.hpp).
template <class F>
dt_result_t with_model(const char* func, dt_model_t h, F&& body) {
  return call<dt_model_s>(func, h, Kind::model, "model", body);
}

}  // namespace dtrain::capi
