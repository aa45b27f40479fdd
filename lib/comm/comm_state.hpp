#pragma once
// What a Communicator owns behind its public face.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/backend.hpp"
#include "comm/group_label.hpp"

namespace dtrain::comm {

struct CommState {
  CommState(std::unique_ptr<Backend> b, std::string n)
      : backend(std::move(b)), name(std::move(n)),
        label(intern_group_label(name, backend->world_ranks())) {}

  std::unique_ptr<Backend> backend;
  std::string name;
  const GroupLabel* label;
  std::atomic<std::uint64_t> bytes_sent{0};
};

}  // namespace dtrain::comm
