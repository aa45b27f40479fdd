#pragma once
// The collective benchmark loop: for each size, warm up, time out-of-place and in-place
// forms (median over iterations of the slowest rank), optionally verify, print one line.
// Returns the count of wrong elements --check found (agreed over the ranks; 0 without it).
#include "dtrain/comm/communicator.hpp"
#include "options.hpp"

namespace bench {

long run_collective(dtrain::Communicator& comm, const std::string& op, const Options& options);

}  // namespace bench
