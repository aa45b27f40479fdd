// Uses only installed public headers: runs one rank of MPI through dtrain and a reduction.
#include <cstdio>

#include "dtrain/comm/runtime.hpp"
#include "dtrain/version.hpp"

int main(int argc, char** argv) {
  dtrain::Runtime runtime(&argc, &argv);
  int value = runtime.rank() + 1;
  runtime.world().all_reduce(&value, &value, 1, dtrain::DType::i32, dtrain::ReduceOp::sum);
  const int expected = runtime.size() * (runtime.size() + 1) / 2;
  std::printf("consumer: dtrain %s, sum %d\n", DTRAIN_VERSION_STRING, value);
  return value == expected ? 0 : 1;
}
