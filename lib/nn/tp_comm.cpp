// The one conjugate-pair mapping that is more than a single collective.
#include "nn/tp_comm.hpp"

namespace dtrain::nn::tp {

void split_to_sequence_fwd(TpGroup& g, Device& dev, const float* full, float* shard,
                           std::size_t shard_n) {
  dev.copy_floats(shard, full + static_cast<std::size_t>(g.rank()) * shard_n,
                  static_cast<std::int64_t>(shard_n));
}

}  // namespace dtrain::nn::tp
