#pragma once
// What a dt_byom_t points to: the program's buffers, mirrored in a flat arena (one copy per
// step) so that the bucketed reduction, ZeRO-sharded AdamW and checkpoints run over offsets.
// Over a device handle the buffers and the arena are GPU memory.
#include <memory>
#include <vector>

#include "checkpoints.hpp"
#include "guard.hpp"
#include "handles.hpp"
#include "step_engine.hpp"

struct dt_byom_s : dtrain::capi::CommUser {
  dt_byom_s(dt_comm_s* c, const dt_optimizer_config_t& cfg);

  struct Buffers {
    float* param;
    const float* grad;
    std::size_t numel;
  };
  dtrain::ParameterStore store;
  dt_optimizer_config_t cfg;
  std::vector<Buffers> buffers;  // registration order = store order
  std::unique_ptr<dtrain::capi::StepEngine> engine;  // made by close(); registration ends
  std::unique_ptr<dtrain::capi::Checkpoints> checkpoints;  // made at the first save or load

  // Allocates the arena and the optimiser on first use (the first step or checkpoint call).
  void close();
  // Program buffers -> arena (parameters, and gradients when with_grads).
  void copy_in(bool with_grads);
  // Arena parameters -> program buffers.
  void copy_out();
  // How the program's buffers and the arena are copied: device to device over a device handle.
  dtrain::CopyKind program_to_arena();
  dtrain::CopyKind arena_to_program();
  dtrain::capi::Checkpoints& checkpoint_io();
};

namespace dtrain::capi {

// The entry-point shape for a byom handle (see call() in guard.hpp).
template <class F>
dt_result_t with_byom(const char* func, dt_byom_t h, F&& body) {
  return call<dt_byom_s>(func, h, Kind::byom, "byom", body);
}

}  // namespace dtrain::capi
