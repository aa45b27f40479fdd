// dtrain-bench: collectives benchmark in the style of nccl-tests. See --help.
#include <cstdio>
#include <exception>
#include <optional>

#include "collectives.hpp"
#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/comm/runtime.hpp"
#include "dtrain/train/same_settings.hpp"
#include "memcpy_bench.hpp"
#include "options.hpp"

int main(int argc, char** argv) {
  std::optional<dtrain::Runtime> started;
  try {
    started.emplace(&argc, &argv);
  } catch (const dtrain::AgreedError& e) {  // every rank alike, before the world exists
    if (dtrain::Runtime::reports_start_failure()) std::fprintf(stderr, "dtrain-bench: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain-bench: %s\n", e.what());
    return 1;
  }
  dtrain::Runtime& runtime = *started;
  const int rank = runtime.rank();
  try {
    bench::Options options;
    switch (bench::parse_options(argc, argv, options, runtime.size(), rank == 0)) {
      case bench::ParseResult::help: return 0;
      case bench::ParseResult::error: return 2;
      case bench::ParseResult::run: break;
    }
    try {
      dtrain::train::agree_same_settings(bench::settings_text(options), runtime.world());
    } catch (const dtrain::AgreedError& e) {  // every rank has it: one reports
      if (rank == 0) std::fprintf(stderr, "dtrain-bench: %s\n", e.what());
      return 2;
    }
    if (options.memcpy_only) {
      dtrain::LocalFailure failure;  // the other ranks wait for the first's result
      try {
        if (rank == 0) bench::run_memcpy(options);
      } catch (const std::exception& e) {
        failure.record(e);
      }
      failure.agree(runtime.world());
      return 0;
    }
    long wrong = 0;
    for (const std::string& op : options.ops) wrong += bench::run_collective(runtime.world(), op, options);
    if (wrong > 0 && rank == 0) std::fprintf(stderr, "dtrain-bench: --check found %ld wrong elements\n", wrong);
    return wrong > 0 ? 1 : 0;
  } catch (const dtrain::AgreedError& e) {  // every rank has it: one reports
    if (rank == 0) std::fprintf(stderr, "dtrain-bench: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain-bench: %s\n", e.what());
    return 1;
  }
}
