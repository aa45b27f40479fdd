// The pure arithmetic of the process grid: validation, and coordinates <-> rank per order.
#include <array>
#include <cstdint>
#include <sstream>
#include <string>

#include "dtrain/comm/process_grid.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

enum Dim { kTp = 0, kDp = 1, kPp = 2 };
constexpr const char* kDimNames[3] = {"tp", "dp", "pp"};

// The dimensions of the order string, fastest first.
std::array<int, 3> parse_order(const std::string& order) {
  std::array<int, 3> dims{};
  int n = 0;
  bool seen[3] = {false, false, false};
  std::istringstream in(order);
  std::string token;
  bool ok = !order.empty();
  while (ok && std::getline(in, token, '-')) {
    int d = -1;
    for (int k = 0; k < 3; ++k)
      if (token == kDimNames[k]) d = k;
    ok = d >= 0 && !seen[d] && n < 3;
    if (ok) {
      seen[d] = true;
      dims[n++] = d;
    }
  }
  DTRAIN_CHECK(ok && n == 3 && order.back() != '-', Errc::invalid_config,
               "invalid process grid order '" << order
                                              << "': expected tp, dp and pp each once, joined "
                                                 "by '-', fastest first (e.g. tp-dp-pp)");
  return dims;
}

std::array<int, 3> sizes_of(const GridShape& s) {
  DTRAIN_CHECK(s.tp > 0 && s.dp > 0 && s.pp > 0, Errc::invalid_argument,
               "process grid shape tp=" << s.tp << " dp=" << s.dp << " pp=" << s.pp
                                        << " is not resolved (call resolve_grid first)");
  return {s.tp, s.dp, s.pp};
}

}  // namespace

GridShape resolve_grid(int world_size, GridShape shape) {
  DTRAIN_CHECK(world_size > 0, Errc::invalid_config, "world size must be positive, got " << world_size);
  DTRAIN_CHECK(shape.tp > 0, Errc::invalid_config,
               "tensor-parallel size tp must be a positive integer, got " << shape.tp);
  DTRAIN_CHECK(shape.pp > 0, Errc::invalid_config,
               "pipeline-parallel size pp must be a positive integer, got " << shape.pp);
  DTRAIN_CHECK(shape.dp >= 0, Errc::invalid_config,
               "data-parallel size dp must be a positive integer (or 0 to infer), got " << shape.dp);
  parse_order(shape.order);
  const std::int64_t tp_pp = std::int64_t{shape.tp} * shape.pp;
  if (shape.dp == 0) {
    DTRAIN_CHECK(world_size % tp_pp == 0, Errc::invalid_config,
                 "cannot infer dp: world size " << world_size << " is not divisible by tp*pp = "
                                                << shape.tp << "*" << shape.pp << " = " << tp_pp);
    shape.dp = static_cast<int>(world_size / tp_pp);
  } else {
    // Compared by division: tp*pp*dp of three ints can pass 2^63, and a wrapped product
    // equal to the world size took a grid of 10^9 x 10^9 x 33 for one rank.
    const bool fits = world_size % tp_pp == 0 && world_size / tp_pp == shape.dp;
    const bool wraps = tp_pp > INT64_MAX / shape.dp;
    DTRAIN_CHECK(fits, Errc::invalid_config,
                 "process grid tp*pp*dp = " << shape.tp << "*" << shape.pp << "*" << shape.dp << " = "
                                            << (wraps ? std::string("at least 2^63") : std::to_string(tp_pp * shape.dp))
                                            << " does not equal the world size " << world_size);
  }
  return shape;
}

int ProcessGrid::rank_of(int tp, int dp, int pp, const GridShape& shape) {
  const std::array<int, 3> size = sizes_of(shape);
  const std::array<int, 3> coord = {tp, dp, pp};
  for (int d = 0; d < 3; ++d)
    DTRAIN_CHECK(coord[d] >= 0 && coord[d] < size[d], Errc::invalid_argument,
                 kDimNames[d] << " coordinate " << coord[d] << " is outside [0, " << size[d] << ")");
  int rank = 0, stride = 1;
  for (int d : parse_order(shape.order)) {
    rank += coord[d] * stride;
    stride *= size[d];
  }
  return rank;
}

GridCoord ProcessGrid::coord_of(int rank, const GridShape& shape) {
  const std::array<int, 3> size = sizes_of(shape);
  const int total = size[0] * size[1] * size[2];
  DTRAIN_CHECK(rank >= 0 && rank < total, Errc::invalid_argument,
               "rank " << rank << " is outside a grid of " << total);
  std::array<int, 3> coord{};
  for (int d : parse_order(shape.order)) {
    coord[d] = rank % size[d];
    rank /= size[d];
  }
  return GridCoord{coord[kTp], coord[kDp], coord[kPp]};
}

}  // namespace dtrain
