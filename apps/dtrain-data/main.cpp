// dtrain-data: text to token shards for dtrain-gpt --data, and back (docs/data.md).
// `encode` runs under mpiexec/srun, every rank encoding a share; `decode` is one process
// (rank 0's, under a launcher).
// Exit codes: 0 success, 2 invalid command line, 1 any other error.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/comm/runtime.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/train/same_settings.hpp"
#include "dtrain/version.hpp"
#include "shard_format.hpp"

namespace {

const char* const kUsage =
    "usage: dtrain-data COMMAND ARGS\n"
    "  encode --tokenizer T --output OUT.bin [--shard-tokens N] [--no-eot] FILES...\n"
    "         text files (paths, glob patterns) to llm.c token shards with GPT-2's tokenizer T\n"
    "         (vocab.json and merges.txt, or their directory), <|endoftext|> before each file;\n"
    "         with --shard-tokens, OUT_000000.bin, ... of N tokens each; under mpiexec/srun\n"
    "         every rank encodes a share\n"
    "  decode [--tokenizer T] [--first K] [--count N] SHARD.bin\n"
    "         the shard's tokens as text (the tokenizer's bytes), or as ids without T\n"
    "  --version\n"
    "exit status: 0 ok, 2 usage or a command that cannot run as given, 1 other errors\n";

struct Usage {
  std::string why;
};

long long count_value(const std::string& option, const char* text, long long lowest) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < lowest) {
    throw Usage{option + " needs a whole number of at least " + std::to_string(lowest) + ", not '" + text + "'"};
  }
  if (errno == ERANGE) throw Usage{option + " " + text + " is too large (at most " + std::to_string(v) + ")"};
  return v;
}

// A command's arguments, read one at a time.
class Arguments {
 public:
  Arguments(int argc, char** argv) : argc_(argc), argv_(argv) {}
  bool next(std::string& word) {
    if (i_ >= argc_) return false;
    word = argv_[i_++];
    return true;
  }
  // The value after option `option`.
  const char* value(const std::string& option) {
    once(option);
    if (i_ >= argc_) throw Usage{option + " needs a value"};
    return argv_[i_++];
  }
  // Refuses an option given twice (as dtrain-gpt does): which one was meant is not known.
  void once(const std::string& option) {
    if (!seen_.insert(option).second) throw Usage{"option '" + option + "' is given more than once"};
  }

 private:
  int argc_, i_ = 0;
  char** argv_;
  std::set<std::string> seen_;
};

// Options before, between or after the files; "--" ends them.
dtrain_data::EncodeOptions encode_options(int argc, char** argv) {
  dtrain_data::EncodeOptions o;
  Arguments args(argc, argv);
  bool options_end = false;
  for (std::string a; args.next(a);) {
    if (options_end) {
      o.inputs.push_back(a);
    } else if (a == "--tokenizer") {
      o.tokenizer = args.value(a);
    } else if (a == "--output") {
      o.output = args.value(a);
    } else if (a == "--shard-tokens") {
      o.shard_tokens = count_value(a, args.value(a), 1);
    } else if (a == "--no-eot") {
      args.once(a);
      o.eot = false;
    } else if (a == "--") {
      options_end = true;
    } else if (a.rfind("--", 0) == 0) {
      throw Usage{"unknown option '" + a + "'"};
    } else {
      o.inputs.push_back(a);
    }
  }
  if (o.tokenizer.empty()) throw Usage{"encode needs --tokenizer"};
  if (o.output.size() < 5 || o.output.compare(o.output.size() - 4, 4, ".bin") != 0) {
    throw Usage{"--output must name a .bin file (dtrain-gpt reads other names as text), not '" + o.output + "'"};
  }
  if (o.shard_tokens > dtrain_data::kMaxShardTokens) {
    throw Usage{"--shard-tokens is at most " + std::to_string(dtrain_data::kMaxShardTokens) + " (the header's count)"};
  }
  if (o.inputs.empty()) throw Usage{"encode needs input files"};
  return o;
}

int decode(int argc, char** argv) {
  std::string tokenizer, shard;
  long long first = 0, count = -1;
  Arguments args(argc, argv);
  for (std::string a; args.next(a);) {
    if (a == "--tokenizer") {
      tokenizer = args.value(a);
    } else if (a == "--first") {
      first = count_value(a, args.value(a), 0);
    } else if (a == "--count") {
      count = count_value(a, args.value(a), 0);
    } else if (a.rfind("--", 0) == 0 || !shard.empty()) {
      throw Usage{a.rfind("--", 0) == 0 ? "unknown option '" + a + "'" : "decode reads one shard"};
    } else {
      shard = a;
    }
  }
  if (shard.empty()) throw Usage{"decode needs a shard"};
  return dtrain_data::decode(shard, tokenizer, first, count);
}

int exit_code(dtrain::Errc code) {
  return code == dtrain::Errc::invalid_argument || code == dtrain::Errc::invalid_config ? 2 : 1;
}

// --help or -h among a command's options (before a "--").
bool asks_for_help(int argc, char** argv) {
  for (int i = 2; i < argc && std::string(argv[i]) != "--"; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return true;
  return false;
}

// The one-process commands: help, version, decode, and the refusal of an unknown one.
int local_command(const std::string& cmd, int argc, char** argv) {
  if (cmd == "--help" || cmd == "-h" || cmd == "help" || asks_for_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("dtrain-data %s\n", DTRAIN_VERSION_STRING);
    return 0;
  }
  if (cmd != "decode") {
    std::fprintf(stderr, "dtrain-data: %s\n%s", cmd.empty() ? "missing command" : ("unknown command '" + cmd + "'").c_str(),
                 kUsage);
    return 2;
  }
  try {
    return decode(argc - 2, argv + 2);
  } catch (const Usage& u) {
    std::fprintf(stderr, "dtrain-data decode: %s (dtrain-data --help: usage)\n", u.why.c_str());
    return 2;
  } catch (const dtrain::Error& e) {
    std::fprintf(stderr, "dtrain-data decode: %s\n", e.what());
    return exit_code(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain-data decode: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  const bool encodes = cmd == "encode" && !asks_for_help(argc, argv);
  // Alone (or as a launcher's only rank, as in a batch script) the one-process commands need
  // no MPI. Over several ranks every rank starts it and the ranks agree on the command first,
  // so that a rank given another one (an MPMD job) stops every rank alike instead of leaving
  // encode's ranks waiting for it; rank 0 then runs a one-process command.
  if (!encodes && dtrain::Runtime::launcher_size() <= 1) return local_command(cmd, argc, argv);
  try {
    dtrain::Runtime runtime(&argc, &argv);
    dtrain::Communicator& world = runtime.world();
    dtrain_data::EncodeOptions options;
    try {
      dtrain::train::agree_same_settings("command = " + cmd + "\nhelp = " + (asks_for_help(argc, argv) ? "1" : "0") + "\n",
                                         world);
      if (!encodes) return world.rank() == 0 ? local_command(cmd, argc, argv) : 0;
      // Each rank reads its own command line: a mistake on any rank stops every rank with
      // that rank's reason.
      dtrain::LocalFailure mistake;
      try {
        options = encode_options(argc - 2, argv + 2);
      } catch (const Usage& u) {
        mistake.record(dtrain::Errc::invalid_argument, u.why + " (dtrain-data --help: usage)");
      }
      mistake.agree(world, "reading the options");
    } catch (const dtrain::Error& e) {  // every rank has it: one reports
      if (world.rank() == 0) std::fprintf(stderr, "dtrain-data%s: %s\n", encodes ? " encode" : "", e.what());
      return exit_code(e.code());
    }
    try {
      return dtrain_data::encode(options, world);
    } catch (const dtrain::Error& e) {
      if (runtime.rank() == 0) std::fprintf(stderr, "dtrain-data encode: %s\n", e.what());
      return exit_code(e.code());
    }
  } catch (const dtrain::AgreedError& e) {  // starting MPI, on every rank alike
    if (dtrain::Runtime::reports_start_failure())
      std::fprintf(stderr, "dtrain-data%s: %s\n", encodes ? " encode" : "", e.what());
    return exit_code(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain-data%s: %s\n", encodes ? " encode" : "", e.what());
    return 1;
  }
}
