#include "dtrain/train/same_settings.hpp"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/comm/agreed_failure.hpp"

namespace dtrain::train {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// What differs between rank 0's settings and this rank's, by the first differing key.
std::string first_difference(const std::string& root, const std::string& mine, int rank) {
  const std::vector<std::string> a = lines_of(root), b = lines_of(mine);
  const std::string advice = " (start every rank with the same options, configuration file and dtrain build)";
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] == b[i]) continue;
    const std::size_t eq = a[i].find(" = ");
    if (eq == std::string::npos || b[i].compare(0, eq + 3, a[i], 0, eq + 3) != 0) break;
    const std::string key = a[i].substr(0, eq);
    return "the ranks were given different settings: --" + key + " is '" + b[i].substr(eq + 3) +
           "' on rank " + std::to_string(rank) + ", '" + a[i].substr(eq + 3) + "' on rank 0" + advice;
  }
  return "the ranks were given different settings: rank " + std::to_string(rank) +
         " knows other ones than rank 0 (another dtrain version?)" + advice;
}

}  // namespace

void agree_same_settings(const std::string& mine, Communicator& world) {
  if (world.size() == 1) return;
  std::int64_t n = static_cast<std::int64_t>(mine.size());
  world.broadcast(&n, &n, 1, DType::i64, 0);
  std::string root = world.rank() == 0 ? mine : std::string(static_cast<std::size_t>(n), '\0');
  world.broadcast(root.data(), root.data(), root.size(), DType::u8, 0);
  LocalFailure f;
  if (mine != root) f.record(Errc::invalid_config, first_difference(root, mine, world.rank()));
  f.agree(world);
}

}  // namespace dtrain::train
