#pragma once
// Which GPU a process uses. select_device() has no communicator, so the plugin takes the
// node-local rank from the variable every common launcher exports (Open MPI, MPICH/Hydra,
// MVAPICH, SLURM, torchrun-style LOCAL_RANK); under mpiexec/srun it equals
// Runtime::local_rank(). Plain C++, tested without a GPU.
#include <vector>

namespace dtrain::cuda {

// The node-local rank from the launcher's environment, -1 when no launcher variable is set.
int local_rank_from_environment();

// The device ordinal for the core's request `requested` (0 = this process's default GPU)
// among the visible devices, usable[i] telling whether ordinal i can run the kernels (new
// enough): DTRAIN_CUDA_DEVICE when set (must be < usable.size(); the device then refuses an
// old GPU itself), otherwise the ((node-local rank + requested) mod U)-th of the U usable
// ones, so ranks sharing a node spread over its GPUs and skip those the kernels cannot run
// on. Throws Error(Errc::invalid_config) for a bad DTRAIN_CUDA_DEVICE, Error(Errc::unavailable)
// when no device is visible or none is usable.
int choose_device(int requested, const std::vector<bool>& usable);

}  // namespace dtrain::cuda
