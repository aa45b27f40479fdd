#include "ckpt/commit.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ckpt/dir_lock.hpp"
#include "dtrain/core/error.hpp"

namespace fs = std::filesystem;

namespace dtrain::ckpt {
namespace {

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  DTRAIN_CHECK(fd >= 0, Errc::io, "cannot open '" << path << "': " << std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories (EINVAL); the rename is still atomic.
  DTRAIN_CHECK(rc == 0 || (directory && err == EINVAL), Errc::io,
               "fsync of '" << path << "' failed: " << std::strerror(err));
}

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

void rename_over(const std::string& from, const std::string& to) {
  DTRAIN_CHECK(std::rename(from.c_str(), to.c_str()) == 0, Errc::io,
               "cannot rename '" << from << "' to '" << to << "': " << std::strerror(errno));
}

// tmp holding exactly text (the file is fsynced by publish).
void write_small_file(const std::string& tmp, const std::string& text) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DTRAIN_CHECK(fd >= 0, Errc::io, "cannot write '" << tmp << "': " << std::strerror(errno));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(fd);
  DTRAIN_CHECK(written, Errc::io, "cannot write '" << tmp << "': " << std::strerror(err));
}

}  // namespace

long step_of_name(const std::string& name) {
  constexpr const char* prefix = "step_";
  constexpr const char* suffix = ".h5";
  if (name.size() < 5 + 8 + 3 || name.compare(0, 5, prefix) != 0 ||
      name.compare(name.size() - 3, 3, suffix) != 0) {
    return -1;
  }
  // Digits only, and few enough to fit: any other name is not a checkpoint of ours.
  const std::string digits = name.substr(5, name.size() - 8);
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stol(digits);
}

bool is_checkpoint_file_name(const std::string& name) {
  const bool tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
  const std::string stem = tmp ? name.substr(0, name.size() - 4) : name;
  return step_of_name(stem) >= 0 || stem == "latest" || name == kLockFileName;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<long, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const long step = step_of_name(name);
    std::error_code type;
    if (step >= 0 && it->is_regular_file(type)) found.emplace_back(step, name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  for (auto& f : found) names.push_back(std::move(f.second));
  return names;
}

void publish(const std::string& tmp, const std::string& final_path) {
  fsync_path(tmp, false);
  rename_over(tmp, final_path);
  fsync_path(parent_of(final_path), true);
}

void sync_made_dirs(const std::string& path, int levels) {
  std::string dir = path;
  for (int i = 0; i < levels; ++i) {
    const std::string parent = parent_of(dir);
    fsync_path(parent, true);
    dir = parent;
  }
}

void write_latest(const std::string& dir, const std::string& name) {
  const std::string latest = (fs::path(dir) / "latest").string();
  try {
    write_small_file(latest + ".tmp", name + "\n");
    publish(latest + ".tmp", latest);
  } catch (const Error& e) {
    // The checkpoint itself is complete: say so, and what a resume from dir takes now.
    const std::string now = read_latest(dir);
    const std::string file = (fs::path(dir) / name).string();
    if (now == name)  // renamed; the directory's sync failed
      DTRAIN_FAIL(Errc::io, file << " is complete and '" << latest << "' names it, but " << e.what()
                                 << " (after a crash the directory may show the previous state)");
    const std::string takes = now.empty() ? "the newest step_*.h5 there, this one" : "'" + now + "'";
    DTRAIN_FAIL(Errc::io, file << " is complete, but '" << latest << "' could not be pointed at it ("
                               << e.what() << "), so a resume from '" << dir << "' takes " << takes
                               << (now.empty() ? "" : ": load the new file by its name to continue from it"));
  }
}

std::string read_latest(const std::string& dir) {
  std::ifstream in((fs::path(dir) / "latest").string());
  // The whole file (its first 4 KiB): a line after the name, or an empty line before it,
  // is not what a save writes, and makes the content no name (resolve.cpp refuses it).
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

void prune(const std::string& dir, int keep, const std::string& current) {
  std::vector<std::string> names = list_checkpoints(dir);  // by step
  // Checkpoints after the current one are another run's (this one started over, or resumed
  // from before them): left alone, and not counted toward `keep`, which would otherwise
  // delete this run's own previous ones first.
  const long now = step_of_name(current);
  names.erase(std::remove_if(names.begin(), names.end(),
                             [&](const std::string& name) { return step_of_name(name) > now; }),
              names.end());
  const std::size_t n = names.size();
  // Best effort: the new checkpoint is committed already, so nothing here may fail the save.
  std::error_code ec;
  for (std::size_t i = 0; i + static_cast<std::size_t>(std::max(keep, 1)) < n; ++i) {
    if (names[i] != current) fs::remove(fs::path(dir) / names[i], ec);
  }
  // Temporaries left by a run that died while writing (iterated without throwing).
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
    std::error_code ignored;
    if (tmp && is_checkpoint_file_name(name)) fs::remove(it->path(), ignored);
  }
}

}  // namespace dtrain::ckpt
