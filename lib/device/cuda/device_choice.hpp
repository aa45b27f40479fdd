#pragma once
// Which GPU a process uses. select_device() has no communicator, so the plugin takes the
// node-local rank from the variable every common launcher exports (Open MPI, MPICH/Hydra,
// MVAPICH, SLURM, torchrun-style LOCAL_RANK); under mpiexec/srun it equals
// Runtime::local_rank(). Plain C++, tested without a GPU.
namespace dtrain::cuda {

// The node-local rank from the launcher's environment, -1 when no launcher variable is set.
int local_rank_from_environment();

// The device ordinal for the core's request `requested` (0 = this process's default GPU)
// among `visible` devices: DTRAIN_CUDA_DEVICE when set (must be < visible), otherwise
// (node-local rank + requested) mod visible, so ranks sharing a node spread over its GPUs.
// Throws Error(Errc::invalid_config) for a bad DTRAIN_CUDA_DEVICE, Error(Errc::unavailable)
// when visible <= 0.
int choose_device(int requested, int visible);

}  // namespace dtrain::cuda
