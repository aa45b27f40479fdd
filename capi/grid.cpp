// The process grid and its groups.
#include "agree.hpp"
#include "guard.hpp"

using namespace dtrain::capi;

namespace {

// Reads a versioned config: fields beyond what the caller's struct_size covers keep defaults.
dtrain::GridShape grid_shape(const dt_grid_config_t* cfg) {
  need_ptr(cfg, "config");
  need(cfg->struct_size >= offsetof(dt_grid_config_t, order) + sizeof(cfg->order),
       "config->struct_size is too small: initialise it with DT_GRID_CONFIG_INIT");
  dtrain::GridShape shape;
  shape.tp = cfg->tp;
  shape.pp = cfg->pp;
  shape.dp = cfg->dp;
  if (cfg->order) shape.order = cfg->order;
  return shape;
}

}  // namespace

extern "C" {

dt_result_t dt_grid_create(dt_context_t ctx, const dt_grid_config_t* config, dt_grid_t* grid) {
  clear_output(grid);
  return call<dt_context_s>(__func__, ctx, Kind::context, "ctx", [&](dt_context_s& c) {
    dtrain::GridShape shape;
    dtrain::Communicator& world = c.runtime.world();
    agreed_checks(world, true, [&] {
      need_ptr(grid, "grid");
      shape = grid_shape(config);
    });
    // Ranks splitting by different shapes would build groups that do not match, and the
    // first collective over them would wait forever.
    std::uint64_t h = mix(mix(mix(fnv1a(shape.order.data(), shape.order.size()), shape.tp), shape.pp), shape.dp);
    need_same_value(world, h, "the ranks were given different grid shapes (tp, pp, dp or order): "
                              "every rank must pass the same config");
    *grid = user_handle(adopt(std::make_unique<dt_grid_s>(&c, shape)));  // alike on every rank now
  });
}

dt_result_t dt_grid_destroy(dt_grid_t grid) {
  return call<dt_grid_s>(__func__, grid, Kind::grid, "grid", [](dt_grid_s& g) {
    if (g.users > 0)
      fail(DT_ERR_INVALID_STATE, "the grid's groups are still used by " + std::to_string(g.users) +
                                     " model or byom handle(s): destroy them first");
    release_child(&g);
  });
}

dt_result_t dt_grid_shape(dt_grid_t grid, int* tp, int* pp, int* dp) {
  return call<dt_grid_s>(__func__, grid, Kind::grid, "grid", [&](dt_grid_s& g) {
    if (tp) *tp = g.grid.tp_size();
    if (pp) *pp = g.grid.pp_size();
    if (dp) *dp = g.grid.dp_size();
  });
}

dt_result_t dt_grid_coords(dt_grid_t grid, int* tp_rank, int* pp_rank, int* dp_rank) {
  return call<dt_grid_s>(__func__, grid, Kind::grid, "grid", [&](dt_grid_s& g) {
    if (tp_rank) *tp_rank = g.grid.tp_rank();
    if (pp_rank) *pp_rank = g.grid.pp_rank();
    if (dp_rank) *dp_rank = g.grid.dp_rank();
  });
}

dt_result_t dt_grid_comm(dt_grid_t grid, dt_group_t group, dt_comm_t* comm) {
  clear_output(comm);
  return call<dt_grid_s>(__func__, grid, Kind::grid, "grid", [&](dt_grid_s& g) {
    need_ptr(comm, "comm");
    const int i = static_cast<int>(group);
    need(i >= DT_GROUP_WORLD && i <= DT_GROUP_DP, "unknown group");
    *comm = user_handle(g.comms[i].get());
  });
}

}  // extern "C"
