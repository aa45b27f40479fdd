// The CPU attention kernels' time per query-row block size, the sizes taking turns so that
// drifts of the machine hit all alike; the fastest of 15 runs of each.
//   cpu_attention B T C NH lse|probabilities BLOCK...   (BLOCK 0: the kernels' default)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "device/cpu/kernels.hpp"

using dtrain::cpu::AttentionSaved;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s B T C NH lse|probabilities BLOCK...\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), T = std::atoi(argv[2]), C = std::atoi(argv[3]),
            NH = std::atoi(argv[4]);
  const AttentionSaved saves = std::strcmp(argv[5], "probabilities") == 0
                                   ? AttentionSaved::probabilities
                                   : AttentionSaved::log_sum_exp;
  std::vector<int> blocks;
  for (int i = 6; i < argc; ++i) blocks.push_back(std::atoi(argv[i]));
  if (B <= 0 || T <= 0 || NH <= 0 || C % NH != 0) {
    std::fprintf(stderr, "B, T, NH must be positive and NH must divide C\n");
    return 2;
  }

  std::vector<float> qkv(static_cast<std::size_t>(B) * T * 3 * C), out(qkv.size() / 3),
      dout(out.size()), dqkv(qkv.size()),
      saved(dtrain::cpu::attention_saved_elems(saves, B, T, NH)), workspace;
  for (const int b : blocks)
    workspace.resize(std::max(workspace.size(), dtrain::cpu::attention_workspace_elems(T, b)));
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  for (float& x : qkv) x = normal(gen);
  for (float& x : dout) x = normal(gen);

  std::vector<double> forward(blocks.size(), 1e30), backward(blocks.size(), 1e30);
  for (int run = 0; run < 15; ++run) {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const auto t0 = Clock::now();
      dtrain::cpu::attention_forward<float>(out.data(), saved.data(), workspace.data(),
                                            qkv.data(), B, T, C, NH, saves, blocks[i]);
      const auto t1 = Clock::now();
      dtrain::cpu::attention_backward<float>(dqkv.data(), workspace.data(), dout.data(),
                                             qkv.data(), saved.data(), B, T, C, NH, saves,
                                             blocks[i], false);
      const auto t2 = Clock::now();
      forward[i] = std::min(forward[i], std::chrono::duration<double, std::milli>(t1 - t0).count());
      backward[i] = std::min(backward[i], std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
  }
  std::printf("B=%d T=%d C=%d NH=%d saves %s\n", B, T, C, NH, argv[5]);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    std::printf("block %4d: forward %8.2f ms  backward %8.2f ms  total %8.2f ms\n", blocks[i],
                forward[i], backward[i], forward[i] + backward[i]);
  return 0;
}
