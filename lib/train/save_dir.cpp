#include "save_dir.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ckpt/commit.hpp"
#include "ckpt/made_dirs.hpp"
#include "core/host_name.hpp"
#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::train {
namespace fs = std::filesystem;

void check_save_dir(const std::string& dir) {
  std::error_code ec;
  // What this makes goes again: the Checkpointer's claim makes it for the run, and takes it
  // away if the run saves nothing there.
  const ckpt::MadeDirs made = ckpt::missing_dirs(dir);
  fs::create_directories(made.path.empty() ? dir : made.path, ec);
  DTRAIN_CHECK(!ec && fs::is_directory(dir, ec), Errc::invalid_config,
               "--save-dir '" << dir << "' is not a directory that can be made"
                              << (ec ? ": " + ec.message() : std::string()));
  const fs::path probe = fs::path(dir) / ".dtrain-write-test";
  bool writable = false;
  int error = 0;
  {
    std::ofstream out(probe);
    writable = out.good();
    error = errno;
  }
  fs::remove(probe, ec);
  ckpt::remove_made(made);
  DTRAIN_CHECK(writable, Errc::invalid_config, "--save-dir '" << dir << "' is not writable: " << std::strerror(error));
  const fs::path latest = fs::path(dir) / "latest";
  DTRAIN_CHECK(!fs::exists(latest, ec) || fs::is_regular_file(latest, ec), Errc::invalid_config,
               "--save-dir '" << dir << "' holds a 'latest' that is not a file");
}

void check_metrics_path(const std::string& metrics, const std::string& dir) {
  std::error_code metrics_ec, dir_ec;
  const fs::path m = fs::weakly_canonical(metrics, metrics_ec), d = fs::weakly_canonical(dir, dir_ec);
  if (metrics_ec || dir_ec) return;  // opening either names the problem
  const std::string name = m.filename().string();
  DTRAIN_CHECK(m.parent_path() != d || !ckpt::is_checkpoint_file_name(name), Errc::invalid_config,
               "--metrics '" << metrics << "' is a name the checkpoints in --save-dir '" << dir << "' use ('" << name
                             << "', written over or removed as they are saved): name another file");
}

namespace {

// Whether `path` holds `token`, trying for up to about two seconds.
bool reads_back(const fs::path& path, const std::string& token) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::ifstream in(path);
    std::string seen;
    if (in && std::getline(in, seen) && seen == token) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace

void check_save_dir_shared(Communicator& world, const std::string& dir) {
  if (world.size() == 1) return;
  const fs::path probe = fs::path(dir) / ".dtrain-shared-test";
  // A token only this start writes: rank 0's host, process and clock.
  char token[128] = {};
  if (world.rank() == 0) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    std::snprintf(token, sizeof token, "%s %ld %lld", host_name("?").c_str(), static_cast<long>(::getpid()),
                  static_cast<long long>(now));
    std::ofstream(probe) << token << "\n";
  }
  world.broadcast(token, token, sizeof token, DType::u8, 0);
  LocalFailure failure;
  if (world.rank() != 0 && !reads_back(probe, token)) {
    failure.record(Errc::invalid_config,
                   "--save-dir '" + dir + "' is not on a file system that every rank sees: rank " +
                       std::to_string(world.rank()) + " on host " + host_name("?") +
                       " cannot read the file rank 0 wrote there (a checkpoint is one file that "
                       "all ranks write; use a shared file system, not a node-local path)");
  }
  try {
    failure.agree(world);
  } catch (...) {
    std::error_code ec;
    if (world.rank() == 0) fs::remove(probe, ec);
    throw;
  }
  std::error_code ec;
  if (world.rank() == 0) fs::remove(probe, ec);
}

}  // namespace dtrain::train
