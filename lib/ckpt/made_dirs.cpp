#include "ckpt/made_dirs.hpp"

#include <filesystem>

namespace dtrain::ckpt {
namespace fs = std::filesystem;

MadeDirs missing_dirs(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return {};  // nothing to undo that could be named safely
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // a trailing separator
  MadeDirs made{p.string(), 0};
  for (; !p.empty() && !fs::exists(p, ec) && !ec; p = p.parent_path()) {
    ++made.levels;
    if (p == p.parent_path()) break;
  }
  return made;
}

void remove_made(const MadeDirs& made) {
  std::error_code ec;
  fs::path p = made.path;
  for (int i = 0; i < made.levels && fs::remove(p, ec) && !ec; ++i) p = p.parent_path();  // fails when not empty
}

}  // namespace dtrain::ckpt
