#pragma once
// Command line of dtrain-bench.
#include <cstddef>
#include <string>
#include <vector>

#include "dtrain/comm/types.hpp"
#include "dtrain/core/dtype.hpp"

namespace bench {

struct Options {
  std::vector<std::string> ops;  // all_reduce, all_gather, reduce_scatter, broadcast
  std::size_t min_bytes = 4;
  std::size_t max_bytes = std::size_t{256} << 20;
  double step_factor = 2.0;
  int iters = 20;
  int warmup = 5;
  bool check = false;
  bool baseline = false;
  bool memcpy_only = false;
  int root = 0;
  dtrain::DType dtype = dtrain::DType::f32;
  dtrain::ReduceOp redop = dtrain::ReduceOp::sum;
};

// "4", "64K", "1M", "2G" (binary multiples), at most 2^40 bytes.
std::size_t parse_bytes(const std::string& text);

// The sizes a run steps through: min_bytes, min_bytes * step_factor, ... up to max_bytes
// (with a little slack for rounding), each cut to whole bytes.
constexpr double kSizeSlack = 1.0000001;
// The last of them.
std::size_t largest_stepped_size(const Options& o);
// Room for the largest message the size loops reach: up to max_bytes * kSizeSlack (past
// --max-bytes by up to 1e-7 of it, for the steps' rounding), plus a little.
std::size_t buffer_bytes(const Options& o);

// The options as "key = value" lines, keys named as the options: every rank must run the
// same sizes, type and operations (dtrain::train::agree_same_settings), or the collectives
// would not match.
std::string settings_text(const Options& o);

// At most this many passes of the size loops (repeated sizes are skipped, so a pass is cheap):
// a --step-factor just above 1 would step (almost) for ever.
constexpr double kMaxSteps = 1e8;

enum class ParseResult { run, help };
// ranks: the world's size (for --root). Prints nothing: help sets help_text, a bad command
// line throws std::invalid_argument with the reason, for main to agree on over the ranks.
ParseResult parse_options(int argc, char** argv, Options& out, int ranks, std::string& help_text);

}  // namespace bench
