// main() of the single-process GPU test programs: CTest's skip code 77 where no GPU and
// plugin are usable (the CPU-side reason is printed), GoogleTest otherwise.
#include <gtest/gtest.h>

#include <cstdio>

#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"

int main(int argc, char** argv) {
  if (!dtrain::cuda_available()) {
    try {
      dtrain::select_device("cuda");
    } catch (const dtrain::Error& e) {
      std::printf("skipped: %s\n", e.what());
    }
    return 77;
  }
  std::printf("GPU: %s\n", dtrain::select_device("cuda").name().c_str());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
