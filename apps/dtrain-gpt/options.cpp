#include "options.hpp"

#include <boost/program_options.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>
#include <vector>

#include "dtrain/core/error.hpp"

namespace po = boost::program_options;
using dtrain::Errc;

namespace dtrain_gpt {
namespace {

// A float default as --help shows it: "0.003", not Boost's "0.0030000000000000001".
po::typed_value<double>* real_value(double* target) {
  std::ostringstream shown;
  shown << *target;
  return po::value(target)->default_value(*target, shown.str());
}

// Boost reads "-1" into an unsigned 64-bit value as 2^64 - 1: digits only, and in range.
std::uint64_t parse_seed(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 20 &&
                      std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  errno = 0;
  const unsigned long long v = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
  DTRAIN_CHECK(digits && errno != ERANGE, Errc::invalid_config,
               "--seed must be an integer in [0, 18446744073709551615], got '" << text << "'");
  return v;
}

// Generation options fail at start-up, on every rank, rather than after training.
void check_generation(const Parsed& p) {
  DTRAIN_CHECK(p.generate >= 0, Errc::invalid_config, "--generate must be >= 0, got " << p.generate);
  DTRAIN_CHECK(p.sampling.temperature >= 0 && std::isfinite(p.sampling.temperature), Errc::invalid_config,
               "--temperature must be finite and >= 0, got " << p.sampling.temperature);
  DTRAIN_CHECK(p.sampling.top_k >= 0, Errc::invalid_config, "--top-k must be >= 0, got " << p.sampling.top_k);
  DTRAIN_CHECK(p.sampling.top_p > 0 && p.sampling.top_p <= 1, Errc::invalid_config,
               "--top-p must be in (0, 1], got " << std::setprecision(17) << p.sampling.top_p);
}

// --prompt as tokens: encoded by a tokenizer that encodes, else its bytes where they are the
// vocabulary, else the ids it lists.
std::vector<std::int32_t> prompt_tokens(const std::string& prompt, int vocab, const dtrain::train::Tokenizer* tokenizer) {
  std::vector<std::int32_t> tokens;
  if (tokenizer && tokenizer->encodes()) {
    tokens = tokenizer->encode(prompt);
  } else if (vocab <= 256) {
    for (const char ch : prompt) tokens.push_back(static_cast<unsigned char>(ch));
  } else {  // decimal ids separated by spaces or commas (no empty item between two commas)
    const bool commas = prompt.find(',') != std::string::npos;
    bool empty_item = false;
    std::size_t from = 0;
    while (from <= prompt.size()) {
      const std::size_t comma = std::min(prompt.find(',', from), prompt.size());
      std::istringstream in(prompt.substr(from, comma - from));
      std::string word;
      bool any = false;
      while (in >> word) {
        DTRAIN_CHECK(std::all_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; }),
                     Errc::invalid_config,
                     "--prompt: with --vocab " << vocab << " above 256 it lists token ids, got '" << word << "'"
                         << (tokenizer ? " (--tokenizer " + tokenizer->describe() + ")" : std::string()));
        errno = 0;
        const long id = std::strtol(word.c_str(), nullptr, 10);
        DTRAIN_CHECK(errno == 0 && id < vocab, Errc::invalid_config,
                     "--prompt holds token " << word << ", outside --vocab " << vocab);
        tokens.push_back(static_cast<std::int32_t>(id));
        any = true;
      }
      empty_item = empty_item || (commas && !any);
      from = comma + 1;
    }
    // (No token at all is the caller's "holds no tokens".)
    DTRAIN_CHECK(!empty_item || tokens.empty(), Errc::invalid_config,
                 "--prompt '" << prompt << "' has an empty item in its comma-separated list");
  }
  for (const std::int32_t t : tokens) {
    DTRAIN_CHECK(t < vocab, Errc::invalid_config, "--prompt holds token " << t << ", outside --vocab " << vocab);
  }
  return tokens;
}

// A switch: `--name` sets it; `--name false` (`0`, `no`, `off`; also `=false`, and `name =
// false` in a --config file) clears it, so the command line can undo a file's `name = true`.
po::typed_value<bool>* switch_value(bool* target) {
  return po::value<bool>(target)->default_value(false)->implicit_value(true);
}

po::options_description describe(Parsed& p, std::string& config_file) {
  dtrain::train::TrainConfig& c = p.config;
  po::options_description general("General");
  general.add_options()
      ("help,h", "print this help and exit")
      ("version", "print the dtrain version and exit")
      ("config", po::value(&config_file), "INI file with any of the options below (key = value)");

  po::options_description model("Model");
  model.add_options()
      ("layers", po::value(&c.layers)->default_value(c.layers), "transformer blocks")
      ("heads", po::value(&c.heads)->default_value(c.heads), "attention heads (must divide d-model)")
      ("d-model", po::value(&c.d_model)->default_value(c.d_model), "embedding width")
      ("seq-len", po::value(&c.seq_len)->default_value(c.seq_len), "context length in tokens")
      ("vocab", po::value(&c.vocab)->default_value(c.vocab), "vocabulary size")
      ("tie-embeddings", po::value(&c.tie_embeddings)->default_value(c.tie_embeddings)->implicit_value(true),
       "share the LM head with the token embedding (a bare --tie-embeddings is true; false unties)");

  po::options_description parallel("Parallelism");
  parallel.add_options()
      ("tp", po::value(&c.tp)->default_value(c.tp), "tensor-parallel size")
      ("pp", po::value(&c.pp)->default_value(c.pp), "pipeline-parallel size")
      ("dp", po::value(&c.dp)->default_value(c.dp), "data-parallel size (0: ranks / (tp*pp))")
      ("zero", po::value(&c.zero)->default_value(c.zero), "ZeRO stage 0, 1, 2 or 3")
      ("schedule", po::value(&c.schedule)->default_value(c.schedule), "pipeline schedule: gpipe, 1f1b, interleaved")
      ("virtual-stages", po::value(&c.virtual_stages)->default_value(c.virtual_stages), "model chunks per rank (interleaved)")
      ("pipeline-layers", po::value(&c.pipeline_layers)->default_value(c.pipeline_layers), "layers per pipeline stage, e.g. 3,2,2,1 (default: balanced)")
      ("sequence-parallel", switch_value(&c.sequence_parallel), "shard LayerNorm/residual regions over the sequence")
      ("micro-batch", po::value(&c.micro_batch)->default_value(c.micro_batch), "sequences per rank per micro-step")
      ("bucket-mb", po::value(&c.bucket_mb)->default_value(c.bucket_mb), "data-parallel gradient bucket size in MiB")
      ("global-batch", po::value(&c.global_batch)->default_value(c.global_batch),
       "sequences per optimiser step (0: micro-batch x dp)");

  po::options_description optim("Optimiser (AdamW)");
  optim.add_options()
      ("lr", real_value(&c.lr), "peak learning rate")
      ("min-lr", real_value(&c.min_lr), "final learning rate of the cosine decay")
      ("warmup-steps", po::value(&c.warmup_steps)->default_value(c.warmup_steps), "linear warm-up steps")
      ("weight-decay", real_value(&c.weight_decay), "decoupled weight decay (matrices and embeddings)")
      ("clip-grad", po::value(&c.clip_grad)->default_value(c.clip_grad), "global gradient-norm clip (0: off)");

  po::options_description data("Data");
  data.add_options()
      ("data", po::value(&c.data), "token files: .bin llm.c shards or plain text; paths and glob patterns separated by commas (absent: built-in synthetic corpus)")
      ("val-data", po::value(&c.val_data), "validation token files, named as --data (absent: hold out --val-fraction of --data)")
      ("val-fraction", real_value(&c.val_fraction), "share of --data's tokens (its end) held out for validation when --val-data is absent");

  po::options_description run("Run");
  run.add_options()
      ("steps", po::value(&c.steps)->default_value(c.steps), "optimiser steps")
      ("seed", po::value<std::string>()->default_value(std::to_string(c.seed))
                   ->notifier([&c](const std::string& v) { c.seed = parse_seed(v); }),
       "seed of initialisation and data")
      ("device", po::value(&c.device)->default_value(c.device), "auto, cpu or cuda")
      ("precision", po::value(&c.precision)->default_value(c.precision), "fp32, bf16 or fp16 (fp32 master weights)")
      ("loss-scale", po::value(&c.loss_scale)->default_value(c.loss_scale), "fp16: initial loss scale")
      ("loss-scale-window", po::value(&c.loss_scale_window)->default_value(c.loss_scale_window), "fp16: clean steps before the loss scale doubles")
      ("min-loss-scale", po::value(&c.min_loss_scale)->default_value(c.min_loss_scale), "fp16: an overflow at this loss scale is an error")
      ("param-storage", po::value(&c.param_storage)->default_value(c.param_storage), "bf16/fp16: where the parameters live between their uses: 16bit (words, widened around each pass: less memory), fp32 (the whole fp32 arena: faster) or auto (fp32 where it takes at most 1/8 of the free memory)")
      ("fp32-param-arena", po::value<bool>()->default_value(false)->implicit_value(true), "the same as --param-storage fp32")
      ("fp32-activations", switch_value(&c.fp32_activations), "bf16/fp16: keep saved activations in fp32 instead of 16 bits (more memory, no conversion passes)")
      ("recompute", switch_value(&c.recompute), "keep only each block's output for backward and recompute the rest (less activation memory, about a fifth more compute)")
      ("deterministic", switch_value(&c.deterministic), "bitwise-reproducible runs");

  po::options_description ckpt("Checkpoints");
  ckpt.add_options()
      ("save-dir", po::value(&c.save_dir), "directory for checkpoints")
      ("save-every", po::value(&c.save_every)->default_value(c.save_every), "steps between checkpoints (0: only at the end)")
      ("resume", po::value(&c.resume)->default_value(c.resume), "auto, none or a checkpoint path")
      ("keep", po::value(&c.keep)->default_value(c.keep), "newest checkpoints kept in --save-dir")
      ("init-from", po::value(&c.init_from), "start a fresh run from these weights instead of random ones: a safetensors file (Hugging Face's GPT-2, dtrain-ckpt export) or a dtrain checkpoint (its model only; step 0, new optimiser state)");

  po::options_description output("Output");
  output.add_options()
      ("log-every", po::value(&c.log_every)->default_value(c.log_every), "steps between progress lines")
      ("metrics", po::value(&c.metrics), "append one JSON line per logged step to this file")
      ("eval-every", po::value(&c.eval_every)->default_value(c.eval_every), "steps between validation passes (0: only at the end)")
      ("eval-batches", po::value(&c.eval_batches)->default_value(c.eval_batches), "global batches per validation pass")
      ("eval-only", switch_value(&c.eval_only), "evaluate the model and exit");

  po::options_description generation("Generation");
  generation.add_options()
      ("generate", po::value(&p.generate)->default_value(p.generate), "after training, print this many tokens generated after --prompt")
      ("prompt", po::value(&p.prompt), "what the generated tokens continue: text, a token per byte, with --vocab up to 256; else token ids separated by spaces or commas; text with a --tokenizer that encodes (absent: the first token of validation sample 0)")
      ("tokenizer", po::value(&p.tokenizer_path), "GPT-2's vocab.json (with merges.txt beside it, --prompt is text), a directory holding them, or llm.c's gpt2_tokenizer.bin: --generate prints text")
      ("temperature", po::value(&p.sampling.temperature)->default_value(p.sampling.temperature), "divides the logits before sampling; 0: always the most likely token")
      ("top-k", po::value(&p.sampling.top_k)->default_value(p.sampling.top_k), "sample among the k most likely tokens only (0: all)")
      ("top-p", po::value(&p.sampling.top_p)->default_value(p.sampling.top_p), "sample among the fewest most likely tokens whose probabilities add up to p (nucleus sampling; 1: all)");

  po::options_description all;  // untitled: Boost would put a ':' after the usage lines
  all.add(general).add(model).add(parallel).add(optim).add(data).add(run).add(ckpt).add(output).add(generation);
  return all;
}

// `--data ''` or `save-dir =` (an unset variable in a job script) would quietly mean the
// default, training on the built-in corpus, saving nothing, writing no metrics or starting
// from random weights, and `--eval-only ''` or `deterministic =` would turn the switch on:
// those empty values are refused, naming the option (a bare `--eval-only` has no value at
// all). `file`: the --config file the options came from, empty for the command line. (Other
// options take '' as their default, as before.)
void refuse_empty_values(const po::parsed_options& parsed, const po::options_description& all,
                         const std::string& file) {
  for (const po::option& o : parsed.options) {
    if (o.value.empty() || !o.value.front().empty()) continue;
    const po::option_description* d = all.find_nothrow(o.string_key, false);
    const bool is_switch = d && dynamic_cast<const po::typed_value<bool>*>(d->semantic().get());
    // (an empty --pipeline-layers, say an unset job-script variable, was the balanced split)
    const bool named = o.string_key == "data" || o.string_key == "val-data" || o.string_key == "save-dir" ||
                       o.string_key == "metrics" || o.string_key == "init-from" || o.string_key == "tokenizer" ||
                       o.string_key == "pipeline-layers";
    if (!named && !is_switch) continue;
    if (file.empty())
      DTRAIN_FAIL(Errc::invalid_config, "--" << o.string_key << " was given an empty value: give "
                                        "one, or leave the option out for its default");
    DTRAIN_FAIL(Errc::invalid_config, "--config file '" << file << "': '" << o.string_key
                                      << " =' has no value: give one, or leave the line out "
                                         "for its default");
  }
}

// What Boost's reader would take otherwise than written is refused: it ends a value at a '#'
// anywhere (`save-dir = runs#2` saves into `runs`), takes `help = no` for --help and prefixes
// the keys after `[run]` with `run.`. Returns the text for it: a UTF-8 byte-order mark (an
// editor's) dropped, `;` comments (which it does not know) as blank lines.
std::string config_text_for_reader(const std::string& text, const std::string& in_file) {
  const std::string bom = "\xEF\xBB\xBF";
  std::istringstream lines(text.compare(0, bom.size(), bom) == 0 ? text.substr(bom.size()) : text);
  std::string line, kept;
  for (int number = 1; std::getline(lines, line); ++number) {
    // Text only: a NUL would cut the messages that quote a value short, an escape sequence
    // would act on the terminal that shows them.
    const auto control = std::find_if(line.begin(), line.end(), [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return (u < 0x20 && c != '\t' && c != '\r') || u == 0x7f;
    });
    DTRAIN_CHECK(control == line.end(), Errc::invalid_config,
                 in_file << "line " << number << " holds the control byte 0x" << std::hex
                         << static_cast<int>(static_cast<unsigned char>(*control)) << std::dec
                         << " at column " << (control - line.begin()) + 1 << ": a config file is text");
    const std::size_t first = line.find_first_not_of(" \t\r");
    const bool comment = first != std::string::npos && (line[first] == '#' || line[first] == ';');
    kept += (comment ? std::string() : line) + "\n";  // numbered as written in Boost's messages
    if (first == std::string::npos || comment) continue;
    DTRAIN_CHECK(line[first] != '[', Errc::invalid_config,
                 in_file << "line " << number << " is a section header ('" << line.substr(first)
                         << "'): the options are keys of no section, write them without it");
    DTRAIN_CHECK(line.find('#') == std::string::npos, Errc::invalid_config,
                 in_file << "line " << number << " has a '#' after its start, which would end the value there ('"
                         << line << "'): give that option on the command line");
    const std::string key = line.substr(first, line.find_first_of(" \t=", first) - first);
    DTRAIN_CHECK(key != "help" && key != "version", Errc::invalid_config,
                 in_file << "line " << number << ": " << key << " is for the command line (--" << key << ")");
  }
  return kept;
}

}  // namespace

Parsed parse_options(int argc, char** argv) {
  Parsed out;
  std::string config_file;
  po::options_description all = describe(out, config_file);
  po::variables_map vm;
  try {
    // No positional arguments: a stray word (`--steps 3 4`, `lr=0.5`) is an error,
    // not silently dropped. They are collected under a hidden name to be named in it.
    po::options_description with_stray;
    with_stray.add(all).add_options()("stray", po::value<std::vector<std::string>>());
    po::positional_options_description stray;
    stray.add("stray", -1);
    // Whole option names only, as in a --config file: with guessing, `--s 1` was `--steps`
    // or `--seed` depending on the other options' names.
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    const po::parsed_options from_command_line =
        po::command_line_parser(argc, argv).options(with_stray).positional(stray).style(style).run();
    refuse_empty_values(from_command_line, all, "");
    // Boost refuses a repeated option, but not a bare switch repeated after a value
    // (`--deterministic false --deterministic` was on): every repeat alike.
    std::set<std::string> given;
    for (const po::option& o : from_command_line.options) {
      DTRAIN_CHECK(o.string_key == "stray" || given.insert(o.string_key).second, Errc::invalid_config,
                   "option '--" << o.string_key << "' cannot be specified more than once");
    }
    po::store(from_command_line, vm);
    std::set<std::string> from_command_line_keys;
    for (const po::option& o : from_command_line.options) from_command_line_keys.insert(o.string_key);
    po::variables_map from_config_file;  // the --config file's values, where one is given
    DTRAIN_CHECK(!vm.count("stray"), Errc::invalid_config,
                 "unexpected argument '" << vm["stray"].as<std::vector<std::string>>().front()
                     << "': options are --name value (see --help)");
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::error_code ec;
      DTRAIN_CHECK(!std::filesystem::is_directory(path, ec), Errc::invalid_config,
                   "--config '" << path << "' is a directory, not a file");
      // Besides regular files, the shell's pipes (`--config <(...)`: /dev/fd/N): a named FIFO
      // would wait for a writer (its open outlasting SIGTERM, which the stop handler takes),
      // a device such as /dev/zero never end.
      const bool shell_pipe = path.rfind("/dev/fd/", 0) == 0 || path.rfind("/proc/self/fd/", 0) == 0;
      DTRAIN_CHECK(shell_pipe || !std::filesystem::exists(path, ec) || std::filesystem::is_regular_file(path, ec),
                   Errc::invalid_config, "--config '" << path << "' is not a regular file");
      errno = 0;
      std::ifstream file(path, std::ios::binary);
      const int open_error = errno;
      DTRAIN_CHECK(file.good(), Errc::invalid_config,
                   "cannot read --config file '" << path << "'"
                       << (open_error ? std::string(": ") + std::strerror(open_error) : std::string())
                       << (shell_pipe ? " (a shell's pipe reaches the processes of that shell only: under "
                                        "mpiexec, each rank's own shell must make it)"
                                      : ""));
      const std::string in_file = "--config file '" + path + "': ";
      // At most 1 MiB, read as far as one byte more.
      constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;
      std::string text(kMaxConfigBytes + 1, '\0');
      file.read(&text[0], static_cast<std::streamsize>(text.size()));
      DTRAIN_CHECK(!file.bad(), Errc::invalid_config, "cannot read --config file '" << path << "'");
      text.resize(static_cast<std::size_t>(file.gcount()));
      DTRAIN_CHECK(text.size() <= kMaxConfigBytes, Errc::invalid_config,
                   in_file << "longer than " << kMaxConfigBytes << " bytes, which no config file is");
      std::stringstream in(config_text_for_reader(text, in_file));
      try {
        const po::parsed_options from_file = po::parse_config_file(in, all);
        for (const po::option& o : from_file.options)
          DTRAIN_CHECK(o.string_key != "config", Errc::invalid_config,
                       in_file << "it names another (config = ...): files do not nest; give the "
                                  "options of both in one file");
        refuse_empty_values(from_file, all, path);
        // Every value of the file is read, also those the command line overrides (storing
        // into vm skips an option already there, with its errors: `lr = abc`, a repeat).
        po::variables_map file_only;
        po::store(from_file, file_only);
        // Command-line values were stored first and take precedence over the file.
        po::store(from_file, vm);
        from_config_file = std::move(file_only);
      } catch (const po::error& e) {
        DTRAIN_FAIL(Errc::invalid_config, in_file << e.what() << " (see --help)");
      }
    }
    po::notify(vm);
    // (The library sees the value only, so it cannot tell --val-fraction 0.1 from none.)
    DTRAIN_CHECK(vm["val-fraction"].defaulted() || !out.config.data.empty(), Errc::invalid_config,
                 "--val-fraction needs --data (the built-in corpus has its own validation split)");
    if (vm["fp32-param-arena"].as<bool>()) {
      // Given in the same place, they contradict each other; else the command line's wins.
      const auto given_in_file = [&](const char* name) {
        return from_config_file.count(name) && !from_config_file[name].defaulted() &&
               !from_command_line_keys.count(name);
      };
      std::string& storage = out.config.param_storage;
      const bool arena_in_file = given_in_file("fp32-param-arena");
      const bool storage_in_file = given_in_file("param-storage");
      const bool storage_given = !vm["param-storage"].defaulted();
      if (storage_given && arena_in_file != storage_in_file) {
        if (storage_in_file) storage = "fp32";  // the command line's --fp32-param-arena wins
      } else {
        DTRAIN_CHECK(!storage_given || storage == "fp32", Errc::invalid_config,
                     "--fp32-param-arena contradicts --param-storage " << storage);
        storage = "fp32";
      }
    }
  } catch (const po::error& e) {
    DTRAIN_FAIL(Errc::invalid_config, e.what() << " (see --help)");
  }
  std::ostringstream help;
  help << "dtrain-gpt: train a GPT with dtrain.\nUsage: mpiexec -n N dtrain-gpt [options]\n"
       << all;
  out.help_text = help.str();
  check_generation(out);
  // Read only where it is used: --generate (after --help and --version have left).
  if (!out.tokenizer_path.empty() && out.generate > 0 && !vm.count("help") && !vm.count("version")) {
    // Up to 256 the tokens are bytes: the prompt is read and the text printed as such.
    DTRAIN_CHECK(out.config.vocab > 256, Errc::invalid_config,
                 "--tokenizer with --vocab " << out.config.vocab
                                             << ": at most 256 the tokens are bytes, read and printed as text "
                                                "without a tokenizer; leave --tokenizer out");
    out.tokenizer = std::make_shared<const dtrain::train::Tokenizer>(out.tokenizer_path);
    DTRAIN_CHECK(out.tokenizer->size() <= out.config.vocab, Errc::invalid_config,
                 "--tokenizer " << out.tokenizer->describe() << " has more tokens than --vocab "
                                << out.config.vocab << ": it is another model's");
  }
  if (out.generate > 0) {  // (without --generate the prompt is not read: one file may serve both commands)
    out.prompt_tokens = prompt_tokens(out.prompt, out.config.vocab, out.tokenizer.get());
    DTRAIN_CHECK(!vm.count("prompt") || !out.prompt_tokens.empty(), Errc::invalid_config,
                 "--prompt holds no tokens: give some, or leave it out to start from the first token "
                 "of validation sample 0");
  }
  if (vm.count("help")) out.action = Action::help;
  else if (vm.count("version")) out.action = Action::version;
  return out;
}

}  // namespace dtrain_gpt
