#pragma once
// What a dt_model_t points to: a built-in model (MLP or GPT), its optimiser step and, from
// the first save or load on, its checkpoint I/O.
#include <memory>

#include "checkpoints.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/nn/mlp.hpp"
#include "guard.hpp"
#include "handles.hpp"
#include "step_engine.hpp"

struct dt_model_s : dtrain::capi::CommUser {
  explicit dt_model_s(dt_comm_s* c) : CommUser(dtrain::capi::Kind::model, c) {}
  // On a GPU: the dp group over a device transport (the engine's and the checkpoints' dp,
  // declared first so that it outlives them); empty on the CPU, where comm's is used.
  dtrain::Communicator device_dp;
  std::unique_ptr<dtrain::MlpModel> mlp;
  std::unique_ptr<dtrain::GptModel> gpt;
  std::unique_ptr<dtrain::capi::StepEngine> engine;
  std::unique_ptr<dtrain::capi::Checkpoints> checkpoints;  // made at the first save or load

  dtrain::ParameterStore& params() { return mlp ? mlp->parameters() : gpt->parameters(); }
  dtrain::Device& device() { return params().device(); }
  // The group the model's collectives run over: device_dp on a GPU, else the handle's.
  dtrain::Communicator& dp() { return device_dp.valid() ? device_dp : *comm->comm; }
  dtrain::capi::Checkpoints& checkpoint_io();
};

namespace dtrain::capi {

// The entry-point shape for a model handle (see call() in guard.hpp).
template <class F>
dt_result_t with_model(const char* func, dt_model_t h, F&& body) {
  return call<dt_model_s>(func, h, Kind::model, "model", body);
}

}  // namespace dtrain::capi
