#pragma once
// Command line and INI file of dtrain-gpt (docs/dtrain-gpt.md lists every option).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/train/config.hpp"
#include "dtrain/train/sampling.hpp"
#include "dtrain/train/tokenizer.hpp"

namespace dtrain_gpt {

enum class Action { train, help, version };

struct Parsed {
  Action action = Action::train;
  dtrain::train::TrainConfig config;
  // After training: tokens to generate after the prompt (0: none), and how they are chosen.
  // --prompt is text, a token per byte, with a vocabulary of up to 256 (bytes are the
  // tokens); above that, token ids separated by spaces or commas; with a --tokenizer that
  // encodes, text it encodes. The tokens are printed as text where a tokenizer decodes them.
  int generate = 0;
  std::string prompt;
  std::vector<std::int32_t> prompt_tokens;
  std::string tokenizer_path;
  std::shared_ptr<const dtrain::train::Tokenizer> tokenizer;  // null: none given
  dtrain::train::SamplingConfig sampling;
  std::string help_text;
};

// Throws dtrain::Error(Errc::invalid_config) with Boost's message for unknown or malformed
// options, for an unreadable --config file and for invalid generation options.
Parsed parse_options(int argc, char** argv);

}  // namespace dtrain_gpt
