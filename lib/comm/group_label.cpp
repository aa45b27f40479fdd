#include "comm/group_label.hpp"

#include <deque>
#include <map>
#include <mutex>

namespace dtrain::comm {

std::string format_rank_list(const std::vector<int>& ranks) {
  constexpr std::size_t kMaxRuns = 16;  // keep the watchdog line readable on big jobs
  std::string out;
  std::size_t runs = 0;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (runs == kMaxRuns) {
      out += ",... (" + std::to_string(ranks.size()) + " ranks)";
      break;
    }
    if (!out.empty()) out += ',';
    if (j - i >= 2) {
      out += std::to_string(ranks[i]) + '-' + std::to_string(ranks[j]);
      ++runs;
      i = j + 1;
    } else {
      out += std::to_string(ranks[i]);
      ++runs;
      ++i;
    }
  }
  return out;
}

const GroupLabel* intern_group_label(const std::string& name, const std::vector<int>& ranks) {
  static std::mutex mutex;
  static std::deque<GroupLabel> labels;  // deque: addresses stay stable as it grows
  static std::map<std::pair<std::string, std::string>, const GroupLabel*> index;
  std::string text = format_rank_list(ranks);
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(name, text);
  auto it = index.find(key);
  if (it != index.end()) return it->second;
  labels.push_back(GroupLabel{name, text});
  index.emplace(std::move(key), &labels.back());
  return &labels.back();
}

}  // namespace dtrain::comm
