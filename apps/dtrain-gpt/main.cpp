// dtrain-gpt: the reference GPT trainer. Run under mpiexec/srun; every rank runs this.
// Exit codes: 0 success, 2 invalid command line or configuration, 1 any other error,
// 3 (dtrain::train::kExitPreempted) stopped by SIGTERM/SIGUSR1 after writing a checkpoint.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/ckpt/file.hpp"
#include "dtrain/comm/runtime.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/train/same_settings.hpp"
#include "dtrain/train/signals.hpp"
#include "dtrain/train/trainer.hpp"
#include "dtrain/version.hpp"
#include "options.hpp"

namespace {

// What a run out of memory can change.
constexpr const char* kLessMemory =
    "a smaller model, --micro-batch or --seq-len, --recompute, --zero, or more ranks";

int exit_code(dtrain::Errc code) {
  return code == dtrain::Errc::invalid_config || code == dtrain::Errc::not_implemented ||
                 code == dtrain::Errc::invalid_argument
             ? 2
             : 1;
}

// Once the ranks know the first that failed (-1: none), it prints and every rank exits alike.
int announce(dtrain::Communicator& ranks, int first, bool failed, const std::string& message, int code) {
  if (first < 0) return 0;
  if (ranks.rank() == first) DTRAIN_LOG(error, message);
  int rc = failed ? code : 0;
  ranks.all_reduce(&rc, &rc, 1, dtrain::DType::i32, dtrain::ReduceOp::max);
  return rc;
}

// Agree on failure across ranks so that exactly one rank prints and every rank exits alike;
// every rank must get here (no collective since the last agreement).
int report(dtrain::Communicator& ranks, bool failed, const std::string& message, int code) {
  return announce(ranks, dtrain::train::first_failed_rank(ranks, failed), failed, message, code);
}

// Tokens as text where a --tokenizer decodes them (its bytes; an id it has none for as
// <|id|>), or where tokens are bytes (vocab <= 256: the built-in corpus, text files), other
// bytes than printable ASCII, newline and tab, and the backslash itself (so an escape is never
// ambiguous), as \xNN; otherwise (a tokenizer's ids, e.g. GPT-2 shards) as numbers separated
// by spaces.
std::string show_tokens(const std::vector<std::int32_t>& tokens, int vocab, const dtrain::train::Tokenizer* tokenizer,
                        bool first = true) {
  std::string out;
  char buf[16];
  for (const std::int32_t t : tokens) {
    if (tokenizer) {
      const std::string& text = tokenizer->bytes(t);
      out += text.empty() ? "<|" + std::to_string(t) + "|>" : text;
      continue;
    }
    if (vocab > 256) {
      std::snprintf(buf, sizeof buf, "%s%d", first ? "" : " ", static_cast<int>(t));
    } else if ((t >= 32 && t < 127 && t != '\\') || t == '\n' || t == '\t') {
      buf[0] = static_cast<char>(t);
      buf[1] = 0;
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(t));
    }
    out += buf;
    first = false;
  }
  return out;
}

// A tokenizer's text for a log line: control bytes and the backslash as \xNN.
std::string escaped(const std::string& text) {
  std::string out;
  char buf[8];
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b != 0x7f && c != '\\') {
      out += c;
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(b));
      out += buf;
    }
  }
  return out;
}

// show_tokens' text for a log line: its newlines and tabs (the only control bytes it keeps)
// as \x0a and \x09.
std::string one_line(const std::string& shown) {
  std::string out;
  for (const char c : shown) out += c == '\n' ? "\\x0a" : c == '\t' ? "\\x09" : std::string(1, c);
  return out;
}

// Rank 0 prints each token to stdout as soon as it is chosen (a CPU may take a while per
// token of a large model); the log line before it goes to stderr.
void generate(dtrain::train::Trainer& trainer, const dtrain_gpt::Parsed& parsed, int rank) {
  const std::vector<std::int32_t>& prompt = parsed.prompt_tokens;
  const int vocab = parsed.config.vocab;
  const dtrain::train::SamplingConfig& sampling = parsed.sampling;
  const dtrain::train::Tokenizer* tok = parsed.tokenizer.get();
  if (rank == 0) {
    std::string from = "the first token of validation sample 0";
    if (!prompt.empty() && tok)  // its text, then its ids
      from = "the prompt '" + escaped(show_tokens(prompt, vocab, tok)) + "' (" +
             show_tokens(prompt, INT32_MAX, nullptr) + ")";
    else if (!prompt.empty())  // as the text is printed, but on one line
      from = "the prompt '" + one_line(show_tokens(prompt, vocab, nullptr)) + "'";
    if (tok) DTRAIN_LOG(info, "tokenizer: " << tok->describe());
    DTRAIN_LOG(info, "generating " << parsed.generate << " tokens (temperature " << sampling.temperature
                                   << ", top-k " << sampling.top_k << ", top-p " << sampling.top_p << ") after "
                                   << from << ":");
  }
  bool first = true;
  int printed = 0;  // what the log line reports: the tokens that reached stdout
  const auto start = std::chrono::steady_clock::now();
  trainer.generate(prompt, parsed.generate, sampling, [&](std::int32_t token) {
    if (rank != 0) return;
    std::cout << show_tokens({token}, vocab, tok, first) << std::flush;
    first = false;
    ++printed;
  });
  if (rank != 0) return;
  std::cout << std::endl;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  DTRAIN_LOG(info, "generated " << printed << " tokens in " << seconds << " s ("
                                << 1e3 * seconds / std::max(printed, 1) << " ms a token, the prompt included)");
}

// What --generate does after training, as "key = value" lines: every rank must be given the
// same (generation under tensor or pipeline parallelism is collective, and replicas would
// sample differently).
std::string generation_settings(const dtrain_gpt::Parsed& p) {
  std::ostringstream os;
  os.precision(17);
  os << "generate = " << p.generate << "\nprompt = ";
  for (std::size_t i = 0; i < p.prompt_tokens.size(); ++i) os << (i ? "," : "") << p.prompt_tokens[i];
  os << "\ntemperature = " << p.sampling.temperature << "\ntop-k = " << p.sampling.top_k
     << "\ntop-p = " << p.sampling.top_p << "\n";
  if (p.generate > 0) os << "tokenizer = " << p.tokenizer_path << "\n";  // read only to generate
  return os.str();
}

// A failure of this rank alone inside the step loop (a bad token in its data, a failed
// read): the other ranks wait in collectives it will never join, and finalising MPI would
// wait for them, so the whole job is ended (exit status `code`) once the message is out.
// (Failures every rank meets alike are AgreedErrors, reported once and exited normally.)
int fail_alone(dtrain::Runtime& runtime, const char* message, int code) {
  dtrain::log::write(dtrain::log::Level::error, message);
  if (runtime.size() > 1) {
    std::cout.flush();  // generated text so far
    dtrain::Runtime::abort_job(code);
  }
  return code;
}

// As report(), for a failure that may be this rank's alone while the others wait for it in
// the collectives of the set-up (a node's allocation failing, a setting read there): the
// agreement goes over `control`, a communicator nothing else uses, so it never meets those
// collectives; a rank that failed and hears nothing from the others for 20 s (half the
// watchdog's limit where that is shorter: the waiting ranks' watchdog would end the job first,
// without this message) prints its message and ends the job. Failures every rank meets agree
// at once, one rank reports.
int report_or_end_job(dtrain::Runtime& runtime, dtrain::Communicator& control, bool failed,
                      const std::string& message, int code) {
  const double alone_after_s = std::min(20.0, dtrain::env::params().comm_timeout_s / 2);
  int first = failed ? control.rank() : std::numeric_limits<int>::max();
  dtrain::Request agreed = control.iall_reduce(&first, &first, 1, dtrain::DType::i32, dtrain::ReduceOp::min);
  if (failed) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(alone_after_s);
    while (!agreed.test()) {
      if (std::chrono::steady_clock::now() > give_up) return fail_alone(runtime, message.c_str(), code);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } else {
    agreed.wait();
  }
  return announce(control, first == std::numeric_limits<int>::max() ? -1 : first, failed, message, code);
}

}  // namespace

int main(int argc, char** argv) {
  // From the start until training ends, SIGTERM and SIGUSR1 only set the flag
  // Trainer::run() acts on: a scheduler's warning during the set-up (a checkpoint load, the
  // data scan) must not kill the rank with no checkpoint and no status 3.
  std::optional<dtrain::train::StopSignalScope> signals;
  signals.emplace();
  std::optional<dtrain::Runtime> started;
  try {
    started.emplace(&argc, &argv);
  } catch (const dtrain::Error& e) {
    // Before the world exists (a malformed DTRAIN_* variable): every rank fails alike, and
    // the launcher's rank 0 reports it.
    const int rank = dtrain::Runtime::launcher_rank(), size = dtrain::Runtime::launcher_size();
    if (rank >= 0 && size > 0) dtrain::log::set_rank(rank, size);
    if (dtrain::Runtime::reports_start_failure()) dtrain::log::write(dtrain::log::Level::error, e.what());
    return exit_code(e.code());
  } catch (const std::exception& e) {
    dtrain::log::write(dtrain::log::Level::error, e.what());
    return 1;
  }
  dtrain::ckpt::stop_hdf5_error_printing();  // dtrain's errors carry HDF5's (after MPI_Init)
  try {
    dtrain::Runtime& runtime = *started;
    dtrain::Communicator& world = runtime.world();
    // Start-up failures are agreed over their own communicator (report_or_end_job).
    dtrain::Communicator control = world.dup("start-up");
    bool failed = false;
    int code = 0;
    std::string message;
    const auto failure = [&](int c, const std::string& what) {
      failed = true;
      code = c;
      message = what;
    };
    dtrain_gpt::Parsed parsed;
    // The command line and --config file, read by each rank alone: a node whose copy of the
    // file is missing or different fails here, before any rank enters the set-up.
    try {
      parsed = dtrain_gpt::parse_options(argc, argv);
    } catch (const dtrain::Error& e) {
      failure(exit_code(e.code()), e.what());
    } catch (const std::exception& e) {
      failure(1, e.what());
    }
    if (int rc = report(control, failed, message, code)) return rc;
    {  // --help or --version on some ranks only: the others would wait in the set-up
      int actions[2] = {static_cast<int>(parsed.action), -static_cast<int>(parsed.action)};
      control.all_reduce(actions, actions, 2, dtrain::DType::i32, dtrain::ReduceOp::min);
      if (actions[0] != -actions[1]) {
        if (control.rank() == 0)
          DTRAIN_LOG(error, "--help or --version was given to some ranks only: start every rank with the same options");
        return 2;
      }
    }
    {  // as the Trainer warns of its options that do nothing
      const dtrain::train::SamplingConfig defaults;
      const dtrain::train::SamplingConfig& s = parsed.sampling;
      if (parsed.action == dtrain_gpt::Action::train && parsed.generate == 0 &&
          (!parsed.prompt.empty() || s.temperature != defaults.temperature || s.top_k != defaults.top_k ||
           s.top_p != defaults.top_p || !parsed.tokenizer_path.empty()))
        DTRAIN_LOG(warn, "--prompt, --temperature, --top-k, --top-p and --tokenizer apply to --generate, which "
                         "is 0 here: they do nothing");
    }
    if (parsed.action == dtrain_gpt::Action::train) {  // before the set-up's work, and its files
      try {
        dtrain::train::agree_same_settings(generation_settings(parsed), control);
      } catch (const dtrain::AgreedError& e) {  // every rank has it: one reports
        if (control.rank() == 0) DTRAIN_LOG(error, e.what());
        return exit_code(e.code());
      }
    }
    std::unique_ptr<dtrain::train::Trainer> trainer;
    try {
      if (parsed.action == dtrain_gpt::Action::train) {
        trainer = std::make_unique<dtrain::train::Trainer>(parsed.config, world);
      }
    } catch (const dtrain::Error& e) {
      if (e.code() == dtrain::Errc::out_of_memory)
        failure(1, std::string(e.what()) + ", setting up the model, its data or its optimiser: " + kLessMemory);
      else
        failure(exit_code(e.code()), e.what());
    } catch (const std::bad_alloc&) {
      failure(1, std::string("out of host memory while setting up the model, its data or its optimiser "
                             "(std::bad_alloc): ") + kLessMemory);
    } catch (const std::exception& e) {
      failure(1, e.what());
    }
    if (int rc = report_or_end_job(runtime, control, failed, message, code)) return rc;

    if (parsed.action == dtrain_gpt::Action::help) {
      if (world.rank() == 0) std::cout << parsed.help_text;
      return 0;
    }
    if (parsed.action == dtrain_gpt::Action::version) {
      if (world.rank() == 0) std::cout << "dtrain-gpt " << DTRAIN_VERSION_STRING << "\n";
      return 0;
    }
    try {
      const dtrain::train::TrainSummary summary = trainer->run();
      signals.reset();  // generation, and the end, take signals as usual
      // A stop that came once the training was done (during its final save) leaves only the
      // generation to a resumed run: without one, the run is complete.
      if (summary.stopped_by_signal && summary.finished && parsed.generate == 0) {
        if (world.rank() == 0) DTRAIN_LOG(info, "the run had finished when the stop signal came: nothing to resume");
        return 0;
      }
      if (summary.stopped_by_signal) return dtrain::train::kExitPreempted;
      if (parsed.generate > 0) generate(*trainer, parsed, world.rank());
      return 0;
    } catch (const dtrain::AgreedError& e) {  // every rank has it: one reports
      if (world.rank() == 0) DTRAIN_LOG(error, e.what());
      return exit_code(e.code());
    } catch (const dtrain::Error& e) {  // here, before the Trainer's destructor waits on anything
      return fail_alone(runtime, e.what(), exit_code(e.code()));
    } catch (const std::exception& e) {
      return fail_alone(runtime, e.what(), 1);
    }
  } catch (const dtrain::Error& e) {
    return fail_alone(*started, e.what(), exit_code(e.code()));
  } catch (const std::exception& e) {
    return fail_alone(*started, e.what(), 1);
  }
}
