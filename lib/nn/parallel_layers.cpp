// Registration and binding of the tensor-parallel layers, and the vocabulary-parallel loss.
#include "dtrain/core/error.hpp"
#include "dtrain/nn/tensor_parallel.hpp"

namespace dtrain::nn {

namespace {
void bind_pair(ParameterStore& ps, const std::string& name, float*& p, float*& g) {
  const ParamInfo& info = ps.at(name);
  p = ps.param(info);
  g = ps.grad(info);
}
}  // namespace

void ColumnParallelLinear::declare(ParameterStore& ps, const std::string& name, int in_features,
                                   int out_features, const TpGroup& tp, int n_parts, bool bias) {
  prefix = name;
  in = in_features;
  out = out_features;
  parts = n_parts;
  has_bias = bias;
  const int P = tp.size();
  DTRAIN_CHECK(parts > 0 && out % (parts * P) == 0, Errc::invalid_config,
               name << ": " << out << " outputs do not split into " << parts << " x " << P
                    << " equal slices");
  out_local = out / P;
  const std::int64_t start = static_cast<std::int64_t>(tp.rank()) * (out / parts / P);
  const bool sharded = P > 1;
  ps.add_slice(prefix + ".weight", {out, in}, {out_local, in}, {start, 0}, /*decay=*/true,
               sharded, 0, parts);
  if (has_bias)
    ps.add_slice(prefix + ".bias", {out}, {out_local}, {start}, /*decay=*/false, sharded, 0,
                 parts);
}

void ColumnParallelLinear::bind(ParameterStore& ps) {
  bind_pair(ps, prefix + ".weight", w, dw);
  if (has_bias) bind_pair(ps, prefix + ".bias", b, db);
}

void RowParallelLinear::declare(ParameterStore& ps, const std::string& name, int in_features,
                                int out_features, const TpGroup& tp, bool bias) {
  prefix = name;
  in = in_features;
  out = out_features;
  has_bias = bias;
  const int P = tp.size();
  DTRAIN_CHECK(in % P == 0, Errc::invalid_config,
               name << ": " << in << " inputs do not split into " << P << " equal slices");
  in_local = in / P;
  adds_bias = tp.rank() == 0;
  ps.add_slice(prefix + ".weight", {out, in}, {out, in_local},
               {0, static_cast<std::int64_t>(tp.rank()) * in_local}, /*decay=*/true, P > 1);
  if (has_bias) ps.add(prefix + ".bias", {out}, /*decay=*/false);  // replicated
}

void RowParallelLinear::bind(ParameterStore& ps) {
  bind_pair(ps, prefix + ".weight", w, dw);
  if (has_bias) bind_pair(ps, prefix + ".bias", b, db);
}

void RowParallelLinear::forward_residual(Device& dev, float* y, const float* residual,
                                         const float* x_local, int N,
                                         const std::uint16_t* x16) const {
  DTRAIN_CHECK(in_local == in, Errc::invalid_argument,
               prefix << ": a residual joins a row-parallel layer's output only in a group of one "
                         "rank (each rank holds a partial sum)");
  dev.linear_forward_residual(y, residual, x_local, w, adds_bias ? b : nullptr, N, in_local, out,
                              x16);
}

void VocabParallelEmbedding::declare(ParameterStore& ps, const std::string& param_name,
                                     int vocab_size, int channels, const TpGroup& tp) {
  name = param_name;
  vocab = vocab_size;
  C = channels;
  shard = vocab_shard(vocab, tp.size(), tp.rank());
  ps.add_slice(name, {vocab, C}, {shard.rows, C}, {shard.start, 0}, /*decay=*/true,
               tp.size() > 1, shard.padded_rows);
}

void VocabParallelEmbedding::bind(ParameterStore& ps) { bind_pair(ps, name, w, dw); }

void VocabParallelCrossEntropy::forward(Device& dev, TpGroup& tp, float* losses, float* lse,
                                        const float* logits, const std::int32_t* targets,
                                        int N) const {
  const int ld = shard.padded_rows;
  if (tp.size() == 1) {
    dev.crossentropy_forward(losses, lse, logits, targets, N, vocab, ld);
    return;
  }
  float* max = scratch;
  float* sumexp = scratch + N;      // sumexp and target logit are adjacent: one all-reduce
  float* target = scratch + 2 * N;
  dev.crossentropy_shard_stats(max, target, logits, targets, N, shard.rows, ld, shard.start);
  tp.all_reduce(max, static_cast<std::size_t>(N), ReduceOp::max);
  dev.crossentropy_shard_sumexp(sumexp, logits, max, N, shard.rows, ld);
  tp.all_reduce(sumexp, 2 * static_cast<std::size_t>(N), ReduceOp::sum);
  dev.crossentropy_shard_finish(losses, lse, max, sumexp, target, N);
}

void VocabParallelCrossEntropy::forward_16bit(Device& dev, const TpGroup& tp, float* losses,
                                              float* lse, const std::uint16_t* logits16,
                                              const std::int32_t* targets, int N) const {
  DTRAIN_CHECK(tp.size() == 1, Errc::invalid_argument,
               "the loss from 16-bit logits needs the whole vocabulary on the rank");
  dev.crossentropy_forward_16bit(losses, lse, logits16, targets, N, vocab, shard.padded_rows);
}

void VocabParallelCrossEntropy::backward(Device& dev, const TpGroup& tp, float* dlogits,
                                         const float* logits, const float* lse,
                                         const std::int32_t* targets, const float* dlosses,
                                         int N) const {
  const int ld = shard.padded_rows;
  if (tp.size() == 1)
    dev.crossentropy_backward(dlogits, logits, lse, targets, dlosses, N, vocab, ld);
  else
    dev.crossentropy_shard_backward(dlogits, logits, lse, targets, dlosses, N, shard.rows, ld,
                                    shard.start);
}

void VocabParallelCrossEntropy::backward_16bit(Device& dev, const TpGroup& tp,
                                               std::uint16_t* dlogits16, const float* logits,
                                               const float* lse, const std::int32_t* targets,
                                               const float* dlosses, int N,
                                               const std::uint16_t* logits16) const {
  const bool whole = tp.size() == 1;
  dev.crossentropy_backward_16bit(dlogits16, logits, lse, targets, dlosses, N,
                                  whole ? vocab : shard.rows, shard.padded_rows,
                                  whole ? 0 : shard.start, logits16);
}

}  // namespace dtrain::nn
