// dtrain-bench: collectives benchmark in the style of nccl-tests. See --help.
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "collectives.hpp"
#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/comm/runtime.hpp"
#include "dtrain/core/error.hpp"
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
    std::string help;
    bool helps = false, read = false;
    // Each rank reads its own command line; a mistake on any rank stops every rank, with
    // that rank's reason, before the first collective that would wait for it.
    try {
      dtrain::LocalFailure mistake;
      try {
        helps = bench::parse_options(argc, argv, options, runtime.size(), help) == bench::ParseResult::help;
      } catch (const std::exception& e) {
        mistake.record(dtrain::Errc::invalid_config, e.what());
      }
      mistake.agree(runtime.world(), "reading the options");
      read = true;
      int asked[2] = {helps ? 1 : 0, helps ? 0 : 1};  // some ranks, or every rank?
      runtime.world().all_reduce(asked, asked, 2, dtrain::DType::i32, dtrain::ReduceOp::max);
      DTRAIN_CHECK(asked[0] == 0 || asked[1] == 0, Errc::invalid_config,
                   "--help was given to some ranks only: start every rank with the same options");
      if (!helps) dtrain::train::agree_same_settings(bench::settings_text(options), runtime.world());
    } catch (const dtrain::Error& e) {  // every rank has it: one reports
      if (rank == 0) std::fprintf(stderr, "dtrain-bench: %s%s\n", e.what(), read ? "" : "\n(--help lists the options)");
      return 2;
    }
    if (helps) {
      if (rank == 0) std::fputs(help.c_str(), stdout);
      return 0;
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
