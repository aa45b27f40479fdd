#pragma once
// Which device a job's ranks train on, and the communicator its buffers move over. Shared by
// the Trainer and the C ABI's built-in models.
#include <string>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"

namespace dtrain::parallel {

// Collective over comm: the device `which` names (auto, cpu or cuda; select_device) on this
// rank, once every rank has opened one of the same kind. Where a rank cannot (an unknown
// name: Errc::invalid_config; cuda without a GPU there: Errc::unavailable), every rank throws
// AgreedError with the lowest such rank's code and message (the others' prefixed "the device
// choice failed on world rank R: "); a GPU on some ranks but not on others fails every rank
// with Errc::unavailable. So none waits for the others in a later collective. `option` names
// the setting in the messages ("--device", "config->device").
DTRAIN_API Device& agreed_device(const std::string& which, Communicator& comm,
                                 const std::string& option);

// Collective over comm: a communicator over the same ranks that moves dev's buffers (NCCL,
// or MPI staged through pinned host memory: comm::choose_device_transport) and host buffers
// (a loss, a norm, a flag) over MPI. Empty (not valid()) on the CPU, where comm itself does.
DTRAIN_API Communicator device_world(Communicator& comm, const Device& dev, const std::string& name);

}  // namespace dtrain::parallel
