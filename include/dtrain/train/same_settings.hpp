#pragma once
// Every rank of a run must be given the same settings: ranks started with different options
// (a configuration file that differs between nodes, a different dtrain version) would
// otherwise diverge silently (another learning rate) or leave each other waiting in
// collectives that do not match (another model shape, another evaluation interval).
#include <string>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/export.hpp"

namespace dtrain::train {

// Collective over world: returns when every rank's `settings` ("key = value" lines, keys
// named as the options: TrainConfig::all_settings_ini(), a program's own) equal rank 0's;
// otherwise every rank throws AgreedError(Errc::invalid_config) naming the first differing
// option and the lowest differing rank. The Trainer checks its config so before any other
// collective.
DTRAIN_API void agree_same_settings(const std::string& settings, Communicator& world);

}  // namespace dtrain::train
