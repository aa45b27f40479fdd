#pragma once
// Checks of --save-dir made before training, so that a bad directory fails at start-up and
// not at the first checkpoint, hours later.
#include <string>

#include "dtrain/comm/communicator.hpp"

namespace dtrain::train {

// On one rank: the directory is made, a file can be created in it, and `latest` there, if
// any, is a file. Throws Error(Errc::invalid_config).
void check_save_dir(const std::string& dir);

// On one rank: the metrics file is none of the files the checkpoints in dir write, replace
// or remove (`latest` would be renamed over it at every save). Throws
// Error(Errc::invalid_config).
void check_metrics_path(const std::string& metrics, const std::string& dir);

// Collective over world, after check_save_dir: a checkpoint is one file that every rank
// writes its part of, so every rank must see the directory rank 0 made. Rank 0 writes a
// probe file there that the others must read back (retrying for a while: network file
// systems may show a new file late); where one cannot, every rank throws
// Error(Errc::invalid_config) naming the first such rank and its host.
void check_save_dir_shared(Communicator& world, const std::string& dir);

}  // namespace dtrain::train
