#pragma once
// This node's name, as the layers that tell nodes apart (a rank's CPUs, its GPU, its memory)
// and name them in messages (a lock's holder, a save directory's probe) read it.
#include <string>

namespace dtrain {

// gethostname(), up to 255 bytes; `unreadable` where it cannot be read.
std::string host_name(const std::string& unreadable = "");

// This machine's running kernel, which containers with names of their own share and two
// machines with one name do not: /proc/sys/kernel/random/boot_id, else the host name; "" where
// neither can be read.
std::string node_id();

}  // namespace dtrain
