#pragma once
// Every rank of a run must be given the same settings: ranks started with different options
// (a configuration file that differs between nodes, a different dtrain version) would
// otherwise diverge silently (another learning rate) or leave each other waiting in
// collectives that do not match (another model shape, another evaluation interval).
#include "dtrain/comm/communicator.hpp"
#include "dtrain/train/config.hpp"

namespace dtrain::train {

// Collective over world, before any other collective of the run: returns when every rank's
// cfg equals rank 0's; otherwise every rank throws Error(Errc::invalid_config) naming the
// lowest differing rank and its first differing setting.
void agree_same_settings(const TrainConfig& cfg, Communicator& world);

}  // namespace dtrain::train
