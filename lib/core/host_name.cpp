#include "core/host_name.hpp"

#include <unistd.h>

namespace dtrain {

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string();
}

}  // namespace dtrain
