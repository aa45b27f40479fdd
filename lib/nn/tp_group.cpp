// The TP group (counted fp32 collectives), the vocabulary split, and the TP-global gradient
// norm.
#include <algorithm>

#include "dtrain/core/error.hpp"
#include "dtrain/nn/tensor_parallel.hpp"

namespace dtrain::nn {

TpCommStats operator-(const TpCommStats& a, const TpCommStats& b) {
  TpCommStats d;
  d.all_reduces = a.all_reduces - b.all_reduces;
  d.all_gathers = a.all_gathers - b.all_gathers;
  d.reduce_scatters = a.reduce_scatters - b.reduce_scatters;
  d.tensor_bytes = a.tensor_bytes - b.tensor_bytes;
  d.ring_bytes = a.ring_bytes - b.ring_bytes;
  return d;
}

TpGroup::TpGroup(Communicator* comm, Device& dev) : comm_(comm), dev_(&dev) {
  if (comm_) {
    DTRAIN_CHECK(comm_->valid(), Errc::invalid_argument, "tensor-parallel communicator is empty");
    size_ = comm_->size();
    rank_ = comm_->rank();
  }
}

void TpGroup::count(std::uint64_t& calls, std::size_t tensor_elems, double ring_fraction) {
  const std::uint64_t bytes = tensor_elems * sizeof(float);
  ++calls;
  stats_.tensor_bytes += bytes;
  stats_.ring_bytes += static_cast<std::uint64_t>(
      static_cast<double>(bytes) * ring_fraction * (size_ - 1) / size_ + 0.5);
}

void TpGroup::all_reduce(float* x, std::size_t n, ReduceOp op) {
  if (size_ == 1) return;
  comm_->all_reduce(x, x, n, DType::f32, op);
  count(stats_.all_reduces, n, 2.0);
}

void TpGroup::all_gather(const float* shard, float* full, std::size_t shard_n) {
  if (size_ == 1) {
    if (full != shard) dev_->copy_floats(full, shard, static_cast<std::int64_t>(shard_n));
    return;
  }
  comm_->all_gather(shard, full, shard_n, DType::f32);
  count(stats_.all_gathers, shard_n * static_cast<std::size_t>(size_), 1.0);
}

void TpGroup::reduce_scatter(const float* full, float* shard, std::size_t shard_n) {
  if (size_ == 1) {
    if (full != shard) dev_->copy_floats(shard, full, static_cast<std::int64_t>(shard_n));
    return;
  }
  comm_->reduce_scatter(full, shard, shard_n, DType::f32, ReduceOp::sum);
  count(stats_.reduce_scatters, shard_n * static_cast<std::size_t>(size_), 1.0);
}

VocabShard vocab_shard(int vocab, int tp_size, int tp_rank, int pad) {
  DTRAIN_CHECK(tp_size > 0 && tp_rank >= 0 && tp_rank < tp_size && pad > 0,
               Errc::invalid_argument, "bad vocab shard request");
  DTRAIN_CHECK(vocab >= tp_size, Errc::invalid_config,
               "vocab (" << vocab << ") must be at least the tensor-parallel size --tp ("
                         << tp_size << ")");
  const int base = vocab / tp_size, extra = vocab % tp_size;
  VocabShard s;
  s.start = tp_rank * base + std::min(tp_rank, extra);
  s.rows = base + (tp_rank < extra ? 1 : 0);
  const int largest = base + (extra > 0 ? 1 : 0);
  s.padded_rows = (largest + pad - 1) / pad * pad;
  return s;
}

double grad_sum_squares(const ParameterStore& ps, Device& dev, Communicator* tp) {
  double sharded = 0, replicated = 0;
  for (const ParamInfo& p : ps) {
    const double s = dev.sum_squares(ps.grad(p), static_cast<std::int64_t>(p.local_numel()));
    (p.tp_sharded ? sharded : replicated) += s;
  }
  if (tp && tp->size() > 1) tp->all_reduce(&sharded, &sharded, 1, DType::f64, ReduceOp::sum);
  return sharded + replicated;
}

}  // namespace dtrain::nn
