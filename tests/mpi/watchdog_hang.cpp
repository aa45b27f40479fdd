// Rank 1 never joins an all_reduce; the others must be aborted by the watchdog with one
// line naming the operation, the group and its ranks (DTRAIN_COMM_TIMEOUT set by the test).
#include <chrono>
#include <cstdio>
#include <thread>

#include "dtrain/comm/runtime.hpp"

int main(int argc, char** argv) {
  dtrain::Runtime runtime(&argc, &argv);
  dtrain::Communicator dp = runtime.world().dup("dp");
  if (runtime.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::minutes(10));  // stuck outside MPI
    return 0;
  }
  float x = 1.0f;
  dp.all_reduce(&x, &x, 1, dtrain::DType::f32, dtrain::ReduceOp::sum);
  std::printf("all_reduce returned without rank 1: the watchdog did not fire\n");
  return 0;
}
