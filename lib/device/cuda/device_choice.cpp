// GPU choice from the node-local rank (see device_choice.hpp).
#include "device/cuda/device_choice.hpp"

#include <cstdlib>
#include <string>

#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::cuda {
namespace {
// Launchers' variables, most specific first. Ill-formed values are the launcher's business:
// they are skipped, not fatal.
const char* const kLocalRankVariables[] = {
    "OMPI_COMM_WORLD_LOCAL_RANK",  // Open MPI
    "MPI_LOCALRANKID",             // MPICH / Hydra, Intel MPI
    "MV2_COMM_WORLD_LOCAL_RANK",   // MVAPICH
    "SLURM_LOCALID",               // srun
    "LOCAL_RANK",                  // torchrun-style launchers
};

int parse_non_negative(const char* text) {
  if (!text || !*text) return -1;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 20) return -1;
  return static_cast<int>(v);
}
}  // namespace

int local_rank_from_environment() {
  for (const char* name : kLocalRankVariables) {
    const int r = parse_non_negative(std::getenv(name));
    if (r >= 0) return r;
  }
  return -1;
}

int choose_device(int requested, const std::vector<bool>& usable) {
  const auto visible = static_cast<long>(usable.size());
  DTRAIN_CHECK(visible > 0, Errc::unavailable, "no CUDA device is visible to this process");
  const long forced = env::get_int(env::cuda::kDevice, -1, 0, env::cuda::kMaxDevice);
  if (forced >= 0) {
    DTRAIN_CHECK(forced < visible, Errc::invalid_config,
                 "DTRAIN_CUDA_DEVICE=" << forced << " but only " << visible
                                       << " CUDA device(s) are visible");
    return static_cast<int>(forced);
  }
  std::vector<int> ordinals;
  for (int d = 0; d < visible; ++d)
    if (usable[static_cast<std::size_t>(d)]) ordinals.push_back(d);
  DTRAIN_CHECK(!ordinals.empty(), Errc::unavailable,
               "none of the " << visible << " visible CUDA devices can run the CUDA plugin's kernels");
  const int local = local_rank_from_environment();
  const long base = local < 0 ? 0 : local;
  const long r = requested < 0 ? 0 : requested;
  return ordinals[static_cast<std::size_t>((base + r) % static_cast<long>(ordinals.size()))];
}

}  // namespace dtrain::cuda
