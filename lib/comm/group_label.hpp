#pragma once
// What the watchdog prints about a group: its name and its members' world ranks. Labels are
// interned and live until exit, so the watchdog thread can read one without racing against
// the destruction of the communicator that used it.
#include <string>
#include <vector>

namespace dtrain::comm {

struct GroupLabel {
  std::string name;
  std::string ranks;  // "0,1" or "0-7,16" (runs of three or more are shortened)
};

const GroupLabel* intern_group_label(const std::string& name, const std::vector<int>& ranks);
std::string format_rank_list(const std::vector<int>& ranks);

}  // namespace dtrain::comm
