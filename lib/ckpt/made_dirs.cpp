#include "ckpt/made_dirs.hpp"

#include <filesystem>

namespace dtrain::ckpt {
namespace fs = std::filesystem;
namespace {

// dir as one spelling (absolute, without "." or a trailing separator), so that counting
// levels and removing them walk the same parents.
fs::path normal(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p;
}

}  // namespace

int missing_levels(const std::string& dir) {
  int levels = 0;
  std::error_code ec;
  for (fs::path p = normal(dir); !p.empty() && !fs::exists(p, ec) && !ec; p = p.parent_path()) {
    ++levels;
    if (p == p.parent_path()) break;
  }
  return levels;
}

void remove_made_levels(const std::string& dir, int levels) {
  std::error_code ec;
  fs::path p = normal(dir);
  for (int i = 0; i < levels && fs::remove(p, ec) && !ec; ++i) p = p.parent_path();  // fails when not empty
}

}  // namespace dtrain::ckpt
