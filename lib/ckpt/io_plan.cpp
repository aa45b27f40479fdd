#include "ckpt/io_plan.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

#include "dtrain/core/error.hpp"

namespace dtrain::ckpt {
namespace {

// This dp rank's equal share of [0, n).
Piece dp_share(std::size_t n, const PlanLayout& l) {
  const auto r = static_cast<std::size_t>(l.dp_rank), d = static_cast<std::size_t>(l.dp_size);
  Piece s;
  s.first = n * r / d;
  s.count = n * (r + 1) / d - s.first;
  return s;
}

// Local elements [a, b) of p where the optimiser's segments overlap them, located in the
// compact state buffers (at_arena_offsets: in the arena).
std::vector<Piece> state_pieces(const optim::AdamW& optimizer, const ParamInfo& p, std::size_t a,
                                std::size_t b, bool at_arena_offsets = false) {
  std::vector<Piece> out;
  const auto& segs = optimizer.segments();
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const std::size_t lo = std::max(segs[i].offset, p.offset + a);
    const std::size_t hi = std::min(segs[i].offset + segs[i].numel, p.offset + b);
    if (lo >= hi) continue;
    const std::size_t mem = at_arena_offsets ? lo : optimizer.state_offset(i) + (lo - segs[i].offset);
    out.push_back({lo - p.offset, hi - lo, mem});
  }
  return out;
}

}  // namespace

std::vector<TensorPlan> plan_io(const std::vector<TensorEntry>& directory,
                                const ParameterStore& params, const optim::AdamW& optimizer,
                                const PlanLayout& layout) {
  std::vector<TensorPlan> plans;
  plans.reserve(directory.size());
  for (const TensorEntry& e : directory) {
    TensorPlan t;
    t.entry = &e;
    t.param = params.find(e.name);
    if (t.param == nullptr) {  // another pipeline stage's tensor: no I/O here
      plans.push_back(std::move(t));
      continue;
    }
    const ParamInfo& p = *t.param;
    DTRAIN_CHECK(p.shape == e.shape, Errc::internal, "tensor " << e.name << " changed shape");
    const std::size_t n = p.local_numel();
    // A tensor held whole is replicated over tp too: tp rank 0's copy is the one written;
    // one held by several stages, the first stage's copy.
    const bool writer = (p.local_shape != p.shape || layout.tp_rank == 0) &&
                        layout.pp_rank == e.first_stage;
    // Sharded (ZeRO), the segments cover only this rank's piece and every replica of it is
    // the owner's; unsharded, every dp rank holds all of it and writes its share.
    const Piece share = dp_share(n, layout);
    auto segment_pieces = [&](bool at_arena_offsets) {
      std::vector<Piece> read = state_pieces(optimizer, p, 0, n, at_arena_offsets), write;
      if (writer) {
        write = layout.optimizer_sharded
                    ? read
                    : state_pieces(optimizer, p, share.first, share.first + share.count, at_arena_offsets);
      }
      return std::make_pair(read, write);
    };
    std::tie(t.state_read, t.state_write) = segment_pieces(false);
    switch (layout.param_source) {
      case ParamSource::arena:
        t.param_read.push_back({0, n, p.offset});
        if (writer && share.count > 0) t.param_write.push_back({share.first, share.count, p.offset + share.first});
        break;
      case ParamSource::arena_pieces:
        std::tie(t.param_read, t.param_write) = segment_pieces(true);
        break;
      case ParamSource::masters:
        t.param_read = t.state_read;
        t.param_write = t.state_write;
        break;
    }
    plans.push_back(std::move(t));
  }
  return plans;
}

}  // namespace dtrain::ckpt
