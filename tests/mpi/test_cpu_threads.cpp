// Threads per rank without DTRAIN_NUM_THREADS (parallel::threads_per_rank): the CPUs a rank may
// run on, shared out among the ranks of its node that may run on the same ones. The test
// sets each rank's affinity itself (every rank of a test job shares one node) and restores it.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "dtrain/core/env.hpp"
#include "dtrain/parallel/cpu_threads.hpp"
#include "parallel/cpu_quota.hpp"
#include "test_support.hpp"

using namespace dtrain;
using dtrain::test::world;

namespace {

// Sets the calling thread's CPUs for the scope; cpus() is what the kernel then allows.
class PinnedTo {
 public:
  explicit PinnedTo(const std::vector<int>& cpus) {
    CPU_ZERO(&before_);
    saved_ = sched_getaffinity(0, sizeof before_, &before_) == 0;
    EXPECT_TRUE(saved_);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus) CPU_SET(c, &set);
    EXPECT_EQ(sched_setaffinity(0, sizeof set, &set), 0);
  }
  ~PinnedTo() {
    if (saved_) sched_setaffinity(0, sizeof before_, &before_);
  }
  PinnedTo(const PinnedTo&) = delete;
  PinnedTo& operator=(const PinnedTo&) = delete;

  static std::vector<int> cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof set, &set);
    std::vector<int> out;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
    return out;
  }

 private:
  cpu_set_t before_;
  bool saved_ = false;
};

// Sets (or, with nullptr, unsets) an environment variable for the scope.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~EnvVar() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace

TEST(CpuThreads, RanksOnTheSameCpusShareThem) {
  if (env::params().num_threads > 0) GTEST_SKIP() << "DTRAIN_NUM_THREADS decides";
  EnvVar no_omp("OMP_NUM_THREADS", nullptr);
  std::vector<int> every_cpu(CPU_SETSIZE);  // the kernel keeps those the job may use
  for (int c = 0; c < CPU_SETSIZE; ++c) every_cpu[static_cast<std::size_t>(c)] = c;
  PinnedTo everywhere(every_cpu);
  // Every rank may now run on all the CPUs of the job (one node, one cpuset in a test job).
  std::int32_t n = static_cast<std::int32_t>(PinnedTo::cpus().size()), lo = n, hi = n;
  world().all_reduce(&lo, &lo, 1, DType::i32, ReduceOp::min);
  world().all_reduce(&hi, &hi, 1, DType::i32, ReduceOp::max);
  ASSERT_EQ(lo, hi) << "the ranks may run on different numbers of CPUs";
  // A CPU limit on the test job's cgroup (a container's --cpus), which all its ranks share,
  // counts as fewer CPUs (threads_within: test_cpu_quota.cpp).
  const double limit = parallel::cgroup_cpu_quota().cpus;
  const int size = world().size();
  const int expected = limit > 0 ? parallel::threads_within(n, size, limit, size) : std::max(1, n / size);
  const parallel::CpuThreads t = parallel::threads_per_rank(world());
  EXPECT_EQ(t.threads, expected) << t.why;
}

TEST(CpuThreads, ARankOnOneCpuRunsOneThread) {
  if (env::params().num_threads > 0) GTEST_SKIP() << "DTRAIN_NUM_THREADS decides";
  EnvVar no_omp("OMP_NUM_THREADS", nullptr);
  const std::vector<int> all = PinnedTo::cpus();
  ASSERT_FALSE(all.empty());
  PinnedTo one({all[static_cast<std::size_t>(world().rank()) % all.size()]});
  const parallel::CpuThreads t = parallel::threads_per_rank(world());
  EXPECT_EQ(t.threads, 1) << t.why;  // counting the node's cores gave one rank all of them
  EXPECT_NE(t.why.find("may run on 1"), std::string::npos) << t.why;
}

TEST(CpuThreads, OmpNumThreadsDecidesWhereSet) {
  if (env::params().num_threads > 0) GTEST_SKIP() << "DTRAIN_NUM_THREADS decides";
  const std::vector<int> all = PinnedTo::cpus();
  ASSERT_FALSE(all.empty());
  PinnedTo one({all.front()});  // the CPUs no longer count
  {
    EnvVar omp("OMP_NUM_THREADS", "3");
    const parallel::CpuThreads t = parallel::threads_per_rank(world());
    EXPECT_EQ(t.threads, 3);
    EXPECT_EQ(t.why, "OMP_NUM_THREADS");
  }
  {
    EnvVar omp("OMP_NUM_THREADS", "5,2");  // the outermost level's
    EXPECT_EQ(parallel::threads_per_rank(world()).threads, 5);
  }
  for (const char* ignored : {"0", "many", "4x"}) {
    EnvVar omp("OMP_NUM_THREADS", ignored);
    EXPECT_EQ(parallel::threads_per_rank(world()).threads, 1) << ignored;
  }
}
