#include "ckpt/adamw_changes.hpp"

#include <cmath>
#include <tuple>

#include "core/number_text.hpp"

namespace dtrain::ckpt {

std::string adamw_changes(const CheckpointInfo& info, const optim::AdamWConfig& ours) {
  std::string changed;
  for (auto [name, theirs, mine] :
       {std::tuple{"beta1", info.beta1, ours.beta1}, std::tuple{"beta2", info.beta2, ours.beta2},
        std::tuple{"eps", info.eps, ours.eps}, std::tuple{"weight_decay", info.weight_decay, ours.weight_decay}}) {
    if (std::isnan(theirs) || theirs == static_cast<double>(mine)) continue;  // stored as the float's double
    changed += std::string(changed.empty() ? "" : ", ") + name + " " + shortest_text(static_cast<float>(theirs)) +
               " -> " + shortest_text(mine);
  }
  return changed;
}

}  // namespace dtrain::ckpt
