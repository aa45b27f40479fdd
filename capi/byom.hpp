#pragma once
// What a dt_byom_t points to: the program's buffers, mirrored in a flat fp32 arena (one copy
// per step) so that the bucketed reduction, ZeRO-sharded AdamW and checkpoints run over
// offsets. Over a device handle the buffers and the arena are GPU memory. A tensor the
// program holds in 16 bits has its fp32 master in the arena: its gradient is widened in,
// the master rounded out, and the program's values are taken only where they changed.
#include <cstdint>
#include <memory>
#include <vector>

#include "agree.hpp"
#include "checkpoints.hpp"
#include "guard.hpp"
#include "handles.hpp"
#include "step_engine.hpp"

struct dt_byom_s : dtrain::capi::CommUser {
  // c: the dp group (a grid's, for a byom made on the grid).
  dt_byom_s(dt_comm_s* c, const dt_optimizer_config_t& cfg, dt_grid_s* grid = nullptr);

  struct Buffers {
    void* param;
    const void* grad;
    std::size_t numel;
    dtrain::DType dtype;  // f32, or the 16-bit format (bf16, f16) of both buffers
    // 16-bit: whether the masters have been taken from the program once; on the CPU the
    // words last written to the program, to see by comparing whether it changed them.
    bool seeded = false;
    std::vector<std::uint16_t> written;
  };
  // Made on a grid (dt_byom_create_grid): the program splits its model over the grid's TP
  // and PP groups. Null for a byom over a dp group.
  dt_grid_s* grid;
  dtrain::ParameterStore store;
  dt_optimizer_config_t cfg;
  float initial_loss_scale = 0;  // dt_byom_scale_loss(); 0: the loss is not scaled
  long skipped = 0;              // steps skipped because gradients overflowed
  std::vector<Buffers> buffers;  // registration order = store order
  std::unique_ptr<dtrain::capi::StepEngine> engine;  // made by close(); registration ends
  std::unique_ptr<dtrain::capi::Checkpoints> checkpoints;  // made at the first save or load
  // On a GPU, two floats per element of the largest 16-bit tensor: where copy_in compares the
  // program's values with the rounded master (allocated with the arena).
  dtrain::DeviceBuffer compare16;

  // The ranks a step or checkpoint call is collective over: the grid's world, or the dp
  // group's (host) ranks.
  dtrain::Communicator& everyone();
  // Allocates the arena and the optimiser on first use (the first step or checkpoint call).
  void close();
  // Program buffers -> arena (parameters, and gradients when with_grads). A 16-bit
  // parameter replaces its master only where the program changed it (every value of that
  // tensor then comes from the program).
  void copy_in(bool with_grads);
  // Arena parameters -> program buffers (16-bit ones rounded).
  void copy_out();
  // How the program's buffers and the arena are copied: device to device over a device handle.
  dtrain::CopyKind program_to_arena();
  dtrain::CopyKind arena_to_program();
  dtrain::capi::Checkpoints& checkpoint_io();

  // Whether some tensor of this rank is fp16, whose gradients may overflow; whether some
  // rank's is (set by close()); whether any gradient in the arena is inf or NaN on some rank
  // (collective over every rank).
  bool holds_f16() const;
  bool any_f16 = false;
  bool gradients_overflowed();

 private:
  // The optimizer settings and the loss scaling, which every rank must share.
  std::uint64_t settings_fingerprint() const;
  // On a grid: settings alike everywhere, a TP group's tensors alike, names unique over the
  // stages. Collective over the grid's world; the first problem found (never throws for one).
  dtrain::capi::Outcome check_split();
  bool program_changed(std::size_t i);  // a 16-bit tensor's words differ from its master's
  // A 16-bit tensor's words and masters agree now (taken from the program, or written to it).
  void in_step(Buffers& b);
};

namespace dtrain::capi {

// The entry-point shape for a byom handle (see call() in guard.hpp).
template <class F>
dt_result_t with_byom(const char* func, dt_byom_t h, F&& body) {
  return call<dt_byom_s>(func, h, Kind::byom, "byom", body);
}

}  // namespace dtrain::capi
