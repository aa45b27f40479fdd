// resolve_resume: which checkpoint a run continues from (rules in checkpoint.hpp).
#include <algorithm>
#include <cctype>
#include <exception>
#include <filesystem>

#include "ckpt/commit.hpp"
#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/core/error.hpp"

namespace fs = std::filesystem;

namespace dtrain::ckpt {
namespace {

// The newest complete checkpoint of dir: `latest`, else the highest step_*.h5 (a file gets
// that name only once complete, so a crash between the rename and `latest` loses nothing).
std::string newest_in(const std::string& dir) {
  const fs::path latest = fs::path(dir) / "latest";
  std::error_code ec;
  // A `latest` that is there but cannot be read as a file (a dangling link, a link loop, a
  // directory) is damage, not absence: falling back would resume from an older step.
  DTRAIN_CHECK(!fs::exists(fs::symlink_status(latest, ec)) || fs::is_regular_file(latest, ec),
               Errc::io, "'" << latest.string() << "' is not a readable file (a dangling link "
                             "or a directory?): remove it to resume from the newest step_*.h5 there");
  const std::string name = read_latest(dir);
  if (!name.empty()) {
    // We write a bare name of a complete checkpoint there (never a *.tmp); anything else (a
    // path, binary junk, a temporary file) is damage.
    const bool plain = step_of_name(name) >= 0 && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isprint(static_cast<unsigned char>(c)) && c != '/';
    });
    DTRAIN_CHECK(plain, Errc::corrupt_data,
                 "'" << (fs::path(dir) / "latest").string()
                     << "' does not hold the name of a checkpoint file in that directory (remove "
                        "it to resume from the newest step_*.h5 there)");
    const fs::path path = fs::path(dir) / name;
    DTRAIN_CHECK(fs::is_regular_file(path), Errc::io,
                 "'" << (fs::path(dir) / "latest").string() << "' names '" << name
                     << "', which is not a checkpoint file there");
    return path.string();
  }
  const std::vector<std::string> all = list_checkpoints(dir);
  return all.empty() ? "" : (fs::path(dir) / all.back()).string();
}

std::string resolve_on_root(const std::string& resume, const std::string& save_dir) {
  if (resume == "none") return "";
  if (resume == "auto") return save_dir.empty() || !fs::is_directory(save_dir) ? "" : newest_in(save_dir);
  if (fs::is_directory(resume)) {
    const std::string path = newest_in(resume);
    DTRAIN_CHECK(!path.empty(), Errc::io, "--resume " << resume << ": no checkpoint in that directory");
    return path;
  }
  DTRAIN_CHECK(fs::is_regular_file(resume), Errc::io,
               "--resume " << resume << (fs::exists(resume) ? ": not a regular file, which a checkpoint is"
                                                            : ": no such checkpoint file"));
  return resume;
}

}  // namespace

std::string resolve_resume(Communicator& world, const std::string& resume, const std::string& save_dir) {
  // Rank 0 decides, so every rank loads the same file (or fails with the same message).
  std::string result;
  LocalFailure f;
  if (world.rank() == 0) {
    try {
      result = resolve_on_root(resume, save_dir);
    } catch (const Error& e) {
      f.record(e);
    } catch (const std::exception& e) {  // the file system's (a symlink loop, a long name)
      f.record(Errc::io, "cannot look for a checkpoint in '" +
                             (resume == "auto" ? save_dir : resume) + "': " + e.what());
    }
  }
  f.agree(world);
  std::uint64_t n = result.size();
  world.broadcast(&n, &n, 1, DType::i64, 0);
  result.resize(n);
  if (n > 0) world.broadcast(result.data(), result.data(), n, DType::u8, 0);
  return result;
}

}  // namespace dtrain::ckpt
