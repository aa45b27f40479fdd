#pragma once
// ProcessGrid: the tensor- (tp), pipeline- (pp) and data-parallel (dp) groups of a job, laid
// out by an order string that lists the dimensions fastest first. The default "tp-dp-pp"
// gives global = tp + dp*TP + pp*TP*DP (Megatron-Core's layout).
#include <string>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/export.hpp"

namespace dtrain {

struct GridShape {
  int tp = 1;
  int pp = 1;
  int dp = 0;  // 0 = infer: world / (tp * pp)
  std::string order = "tp-dp-pp";
};

struct GridCoord {
  int tp = 0;
  int dp = 0;
  int pp = 0;
};

// Validates shape against world_size without MPI and returns it with dp filled in.
// Throws Error(Errc::invalid_config) with a message naming what is wrong.
DTRAIN_API GridShape resolve_grid(int world_size, GridShape shape);

class DTRAIN_API ProcessGrid {
 public:
  // Collective over world. A shape invalid on some rank, or ranks given different shapes,
  // throw AgreedError(Errc::invalid_config) on every rank.
  ProcessGrid(const Communicator& world, const GridShape& shape);

  const GridShape& shape() const noexcept { return shape_; }  // resolved (dp > 0)
  int tp_size() const noexcept { return shape_.tp; }
  int pp_size() const noexcept { return shape_.pp; }
  int dp_size() const noexcept { return shape_.dp; }
  int tp_rank() const noexcept { return coord_.tp; }
  int pp_rank() const noexcept { return coord_.pp; }
  int dp_rank() const noexcept { return coord_.dp; }

  Communicator& world() noexcept { return world_; }
  Communicator& tp() noexcept { return tp_; }
  Communicator& pp() noexcept { return pp_; }
  Communicator& dp() noexcept { return dp_; }
  // First and last pipeline stage of this rank's (tp, dp) coordinate, to tie embeddings.
  // With pp == 1 it is the rank alone. A rank outside it (a middle stage) gets a group of
  // itself, so a reduction over it is a harmless no-op; in_embedding_group() says which.
  Communicator& embedding() noexcept { return embedding_; }
  bool in_embedding_group() const noexcept;
  bool is_first_stage() const noexcept { return coord_.pp == 0; }
  bool is_last_stage() const noexcept { return coord_.pp == shape_.pp - 1; }

  // Ranks (in the world communicator given) of each group, in group-rank order.
  std::vector<int> tp_members() const;
  std::vector<int> dp_members() const;
  std::vector<int> pp_members() const;
  std::vector<int> embedding_members() const;

  // Coordinates -> rank per the order string. The shape must be resolved (dp > 0).
  static int rank_of(int tp, int dp, int pp, const GridShape& shape);
  static GridCoord coord_of(int rank, const GridShape& shape);

 private:
  GridShape shape_;
  GridCoord coord_;
  Communicator world_, tp_, pp_, dp_, embedding_;
};

}  // namespace dtrain
