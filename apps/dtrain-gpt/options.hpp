#pragma once
// Command line and INI file of dtrain-gpt (docs/dtrain-gpt.md lists every option).
#include <string>

#include "dtrain/train/config.hpp"

namespace dtrain_gpt {

enum class Action { train, help, version };

struct Parsed {
  Action action = Action::train;
  dtrain::train::TrainConfig config;
  std::string help_text;
};

// Throws dtrain::Error(Errc::invalid_config) with Boost's message for unknown or malformed
// options, and for an unreadable --config file.
Parsed parse_options(int argc, char** argv);

}  // namespace dtrain_gpt
