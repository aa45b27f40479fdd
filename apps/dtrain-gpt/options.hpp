#pragma once
// Command line and INI file of dtrain-gpt (docs/dtrain-gpt.md lists every option).
#include <string>

#include "dtrain/train/config.hpp"
#include "dtrain/train/sampling.hpp"

namespace dtrain_gpt {

enum class Action { train, help, version };

struct Parsed {
  Action action = Action::train;
  dtrain::train::TrainConfig config;
  // After training: tokens to generate after `prompt` (0: none), and how they are chosen.
  int generate = 0;
  std::string prompt;
  dtrain::train::SamplingConfig sampling;
  std::string help_text;
};

// Throws dtrain::Error(Errc::invalid_config) with Boost's message for unknown or malformed
// options, for an unreadable --config file and for invalid generation options.
Parsed parse_options(int argc, char** argv);

}  // namespace dtrain_gpt
