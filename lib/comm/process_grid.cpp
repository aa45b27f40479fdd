// ProcessGrid: one split of the world communicator per group kind.
#include "dtrain/comm/process_grid.hpp"

namespace dtrain {

ProcessGrid::ProcessGrid(const Communicator& world, const GridShape& shape)
    : shape_(resolve_grid(world.size(), shape)),  // throws on every rank alike, before any MPI
      coord_(coord_of(world.rank(), shape_)) {
  const int TP = shape_.tp, DP = shape_.dp;
  const GridCoord c = coord_;
  world_ = world.dup("world");
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
