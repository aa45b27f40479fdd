// ProcessGrid: one split of the world communicator per group kind.
#include "dtrain/comm/process_grid.hpp"

#include <algorithm>
#include <cstdint>

#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/core/hash.hpp"

namespace dtrain {

namespace {

// The shape resolved, agreed by every rank of world: a shape invalid on some ranks only, or
// ranks given different shapes (groups that do not match: a dp average over one rank)
// throw AgreedError(Errc::invalid_config) on every rank, naming the lowest such rank.
GridShape agreed_shape(Communicator& world, const GridShape& given) {
  LocalFailure f;
  GridShape shape;
  try {
    shape = resolve_grid(world.size(), given);
  } catch (const Error& e) {
    f.record(e);
  }
  f.agree(world, "the process grid");
  const std::int64_t mine[4] = {shape.tp, shape.pp, shape.dp,
                                static_cast<std::int64_t>(fnv1a(shape.order.data(), shape.order.size()) >> 1)};
  std::int64_t first[4] = {mine[0], mine[1], mine[2], mine[3]};
  world.broadcast(first, first, 4, DType::i64, 0);
  const auto text = [](const std::int64_t* s) {
    return "tp " + std::to_string(s[0]) + ", pp " + std::to_string(s[1]) + ", dp " + std::to_string(s[2]);
  };
  if (!std::equal(mine, mine + 4, first)) {
    f.record(Errc::invalid_config, "the ranks were given different process grids: rank " +
                                       std::to_string(world.rank()) + " has " + text(mine) + ", rank 0 " +
                                       text(first) + (first[3] == mine[3] ? "" : ", in another order"));
  }
  f.agree(world);
  return shape;
}

}  // namespace

ProcessGrid::ProcessGrid(const Communicator& world, const GridShape& shape) : world_(world.dup("world")) {
  shape_ = agreed_shape(world_, shape);
  coord_ = coord_of(world_.rank(), shape_);
  const int TP = shape_.tp, DP = shape_.dp;
  const GridCoord c = coord_;
  // Color: the coordinates the group shares; key: the one that varies, so that the group
  // rank equals the grid coordinate.
  tp_ = world.split(c.dp + c.pp * DP, c.tp, "tp");
  dp_ = world.split(c.tp + c.pp * TP, c.dp, "dp");
  pp_ = world.split(c.tp + c.dp * TP, c.pp, "pp");
  // Members tie first and last stage of one (tp, dp); a middle stage gets a group of itself.
  const int embedding_color = in_embedding_group() ? c.tp + c.dp * TP : TP * DP + world.rank();
  embedding_ = world.split(embedding_color, c.pp, "embedding");
}

bool ProcessGrid::in_embedding_group() const noexcept {
  return coord_.pp == 0 || coord_.pp == shape_.pp - 1;
}

std::vector<int> ProcessGrid::tp_members() const {
  std::vector<int> out;
  for (int t = 0; t < shape_.tp; ++t) out.push_back(rank_of(t, coord_.dp, coord_.pp, shape_));
  return out;
}

std::vector<int> ProcessGrid::dp_members() const {
  std::vector<int> out;
  for (int d = 0; d < shape_.dp; ++d) out.push_back(rank_of(coord_.tp, d, coord_.pp, shape_));
  return out;
}

std::vector<int> ProcessGrid::pp_members() const {
  std::vector<int> out;
  for (int p = 0; p < shape_.pp; ++p) out.push_back(rank_of(coord_.tp, coord_.dp, p, shape_));
  return out;
}

std::vector<int> ProcessGrid::embedding_members() const {
  const int first = rank_of(coord_.tp, coord_.dp, 0, shape_);
  const int last = rank_of(coord_.tp, coord_.dp, shape_.pp - 1, shape_);
  if (!in_embedding_group()) return {rank_of(coord_.tp, coord_.dp, coord_.pp, shape_)};
  if (first == last) return {first};
  return {first, last};
}

}  // namespace dtrain
