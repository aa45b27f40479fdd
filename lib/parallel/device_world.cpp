#include "dtrain/parallel/device_world.hpp"

#include "comm/nccl_loader.hpp"
#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain::parallel {

Device& agreed_device(const std::string& which, Communicator& comm, const std::string& option) {
  Device* chosen = nullptr;
  LocalFailure failure;
  try {
    DTRAIN_CHECK(which == "auto" || which == "cpu" || which == "cuda", Errc::invalid_config,
                 option << " must be auto, cpu or cuda, got '" << which << "'");
    chosen = &select_device(which, option);
  } catch (const std::exception& e) {
    failure.record(e);
  }
  // The failing rank's own reason on every rank (a typo, no GPU there), not a guess.
  failure.agree(comm, "the device choice");
  // Did any rank find a GPU, did any not (max over ranks).
  const bool on_gpu = chosen->kind() != DeviceKind::cpu;
  int any[2] = {on_gpu ? 1 : 0, on_gpu ? 0 : 1};
  comm.all_reduce(any, any, 2, DType::i32, ReduceOp::max);
  DTRAIN_CHECK(any[0] == 0 || any[1] == 0, Errc::unavailable,
               option << " " << which << " found a GPU on some ranks but not on others; "
                      << "every rank must train on the same kind of device");
  return *chosen;
}

Communicator device_world(Communicator& comm, const Device& dev, const std::string& name) {
  if (dev.kind() == DeviceKind::cpu && !comm::device_transports_overridden()) return {};
  const comm::DeviceTransport t = comm::choose_device_transport(comm);
  if (comm.rank() == 0) {
    DTRAIN_LOG(info, "device buffers move over " << comm::device_transport_name(t)
                                                 << (t == comm::DeviceTransport::nccl
                                                         ? " (point-to-point: mpi_staged)"
                                                         : ""));
  }
  return comm::device_communicator(comm, t, name);
}

}  // namespace dtrain::parallel
