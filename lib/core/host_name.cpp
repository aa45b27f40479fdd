#include "core/host_name.hpp"

#include <unistd.h>

#include <fstream>

namespace dtrain {

std::string host_name(const std::string& unreadable) {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : unreadable;
}

std::string node_id() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  return boot_id.empty() ? host_name() : boot_id;
}

}  // namespace dtrain
