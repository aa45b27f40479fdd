#pragma once
// What a dt_model_t points to: a built-in model (MLP or GPT), its layout over the ranks, its
// optimiser step and, from the first save or load on, its checkpoint I/O.
#include <memory>
#include <utility>

#include "agree.hpp"
#include "checkpoints.hpp"
#include "dtrain/comm/process_grid.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/nn/mlp.hpp"
#include "dtrain/parallel/pipeline.hpp"
#include "guard.hpp"
#include "handles.hpp"
#include "step_engine.hpp"

struct dt_model_s : dtrain::capi::CommUser {
  explicit dt_model_s(dt_comm_s* c) : CommUser(dtrain::capi::Kind::model, c) {}
  // On a GPU: the group the model was made over (dp, or a grid's world) over a device
  // transport; empty on the CPU. Declared first so that it outlives what uses it.
  dtrain::Communicator device_group;
  // A model made on a grid: its TP, PP and DP groups, split from device_group or the grid's
  // world.
  std::unique_ptr<dtrain::ProcessGrid> layout;
  // Under pipeline parallelism: the ranks of this rank's replica of the model (its TP groups
  // on every stage), which pass through the model together.
  dtrain::Communicator replica;
  std::unique_ptr<dtrain::MlpModel> mlp;
  std::unique_ptr<dtrain::GptModel> gpt;
  // Under pipeline parallelism: the schedule that runs a pass's micro-batches through the
  // stages, and how many a batch is cut into.
  std::unique_ptr<dtrain::parallel::PipelineExecutor> pipeline;
  int micro_batches = 1;
  std::unique_ptr<dtrain::capi::StepEngine> engine;
  // The GEMM operand format of its passes (config->precision). The device is the process's,
  // so every call sets it (with_model): models of different precisions can live side by side.
  dtrain::DType precision = dtrain::DType::f32;
  std::unique_ptr<dtrain::capi::Checkpoints> checkpoints;  // made at the first save or load
  // Tied embeddings under pipeline parallelism: the first and the last stage each hold wte,
  // and this rank is one of them (the pair of its replica; null otherwise). Values
  // dt_model_set_tensor() gave this rank's wte (its slice, full precision) wait here for the
  // next pass, step or save, which gives them to the other end (share_tied_embedding()).
  dtrain::Communicator* tied = nullptr;
  std::vector<float> tied_written;
  // A step, a tensor set or a load since dt_gpt_decode() began its text: the keys and values
  // it keeps came from other parameters, so only a new text may follow.
  bool decoded_text_stale = false;

  dtrain::ParameterStore& params() { return mlp ? mlp->parameters() : gpt->parameters(); }
  dtrain::Device& device() { return params().device(); }
  // Logits per row: the MLP's classes, the GPT's vocabulary (every stage knows it).
  int num_logits() const { return mlp ? mlp->config().sizes.back() : gpt->config().vocab; }
  // The data-parallel group the steps average over.
  dtrain::Communicator& dp() {
    if (layout) return layout->dp();
    return device_group.valid() ? device_group : *comm->comm;
  }
  // The tensor-parallel group of a model split over several ranks; null otherwise.
  dtrain::Communicator* tp() { return layout && layout->tp_size() > 1 ? &layout->tp() : nullptr; }
  // The pipeline group of a model cut into stages; null otherwise.
  dtrain::Communicator* pp() { return layout && layout->pp_size() > 1 ? &layout->pp() : nullptr; }
  // Every rank of the model (TP x PP x DP).
  dtrain::Communicator& group() { return layout ? layout->world() : dp(); }
  // The ranks that make a call together, where its arguments are agreed: every rank of the
  // model where ZeRO makes the call collective over dp; else for a pass through the model the
  // replica's (its TP groups on every pipeline stage), for a tensor call the TP group (null
  // without one: the call is this rank's alone).
  dtrain::Communicator* callers(bool collective_over_dp, bool pass = false) {
    if (collective_over_dp) return &group();
    return pass && pp() ? &replica : tp();
  }
  dtrain::capi::Checkpoints& checkpoint_io();
};

namespace dtrain::capi {

// Whether a caller's config struct reaches the field at `offset` (fields are only ever
// appended: an older caller's struct ends before the newer ones).
template <class Config>
bool covers(const Config* config, std::size_t offset, std::size_t size) {
  return config->struct_size >= offset + size;
}

// Under tensor parallelism the ranks of a TP group compute one model and must be given the
// same inputs, and so must a pipeline's stages for a pass (pass: a forward, evaluation or
// decoding): `hash` (of this rank's `what`) is compared over m.callers(false, pass), and
// every rank of m.callers(collective_over_dp, pass) fails alike (DT_ERR_INVALID_ARGUMENT)
// when they differ: where ZeRO makes the call collective over dp, the other groups would
// wait for it in the gradient reduction. A no-op for a model on one rank.
void need_same_inputs(dt_model_s& m, std::uint64_t hash, const char* what, bool collective_over_dp,
                      bool pass);

// A call's argument checks (agreed_checks), agreed by m.callers(collective_over_dp, pass).
template <class F>
void agreed_model_checks(dt_model_s& m, bool collective_over_dp, F&& checks, bool pass = false) {
  if (Communicator* callers = m.callers(collective_over_dp, pass))
    agreed_checks(*callers, true, std::forward<F>(checks));
  else
    checks();
}

// Tied embeddings under pipeline parallelism: where dt_model_set_tensor("wte") ran on one
// end of the pipeline since the last call, both ends now hold those values (the first
// stage's where both were given some). Collective over m.tied; a no-op without it.
void share_tied_embedding(dt_model_s& m);

// This rank's slice of a whole tensor (p.logical_numel() floats) as runs of its parameter
// arena (under ZeRO 3 only the parts in this rank's pieces), and their writing. Local.
struct ArenaWrite {
  std::size_t offset;
  std::vector<float> values;
};
std::vector<ArenaWrite> arena_writes(dt_model_s& m, const dtrain::ParamInfo& p, const float* whole);
void write_arena(dt_model_s& m, const std::vector<ArenaWrite>& writes);

// The entry-point shape for a model handle (see call() in guard.hpp).
template <class F>
dt_result_t with_model(const char* func, dt_model_t h, F&& body) {
  return call<dt_model_s>(func, h, Kind::model, "model", [&](dt_model_s& m) {
    m.device().set_gemm_operand_format(m.precision);
    body(m);
  });
}

}  // namespace dtrain::capi
