// GoogleTest main for MPI tests: MPI comes up through dtrain::Runtime, only rank 0 prints
// the usual report (other ranks print their failures), and every rank exits non-zero when
// any rank failed.
#include <gtest/gtest.h>

#include <cstdio>

#include "test_support.hpp"

namespace dtrain::test {
namespace {
Runtime* g_runtime = nullptr;

class FailuresOnly : public testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};
}  // namespace

Runtime& runtime() { return *g_runtime; }
Communicator& world() { return g_runtime->world(); }

}  // namespace dtrain::test

int main(int argc, char** argv) {
  dtrain::Runtime runtime(&argc, &argv);
  dtrain::test::g_runtime = &runtime;
  testing::InitGoogleTest(&argc, argv);
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (runtime.rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new dtrain::test::FailuresOnly(runtime.rank()));
  }
  int failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int failed_anywhere = 0;
  runtime.world().all_reduce(&failed_here, &failed_anywhere, 1, dtrain::DType::i32,
                             dtrain::ReduceOp::max);
  if (failed_anywhere && !failed_here && runtime.rank() == 0)
    std::fprintf(stderr, "[rank 0] tests failed on another rank (see its output)\n");
  dtrain::test::g_runtime = nullptr;
  return failed_anywhere;
}
