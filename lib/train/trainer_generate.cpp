// Text generation from the trained model: one forward pass per new token over the last
// seq-len tokens (fewer while the text is shorter), the next token chosen from the logits of
// its last position.
#include <algorithm>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/rng.hpp"
#include "dtrain/nn/tensor_parallel.hpp"
#include "trainer_state.hpp"

namespace dtrain::train {

std::vector<std::int32_t> Trainer::generate(std::vector<std::int32_t> context, int count,
                                            const SamplingConfig& sampling) {
  State& s = *s_;
  DTRAIN_CHECK(!s.pipeline, Errc::invalid_config,
               "generation needs --pp 1 (a checkpoint of any layout resumes at --pp 1)");
  DTRAIN_CHECK(count >= 0, Errc::invalid_argument, "generate: count must be >= 0, got " << count);
  const int vocab = s.cfg.vocab, T = s.cfg.seq_len;
  for (const std::int32_t t : context) {
    DTRAIN_CHECK(t >= 0 && t < vocab, Errc::invalid_argument,
                 "prompt token " << t << " is outside the vocabulary [0, " << vocab << ")");
  }
  if (context.empty()) {  // start from the data's own first validation token
    std::int32_t first = 0;
    s.source->sample(Split::val, 0, 1, &first);
    context.push_back(first);
  }

  // The logits' columns are this TP rank's vocabulary rows; the group gathers whole rows.
  const nn::VocabShard& mine = s.model.vocab_shard();
  const int tp = s.grid.tp_size();
  std::vector<std::size_t> rows(static_cast<std::size_t>(tp));
  for (int r = 0; r < tp; ++r) rows[static_cast<std::size_t>(r)] = static_cast<std::size_t>(nn::vocab_shard(vocab, tp, r).rows);
  std::vector<float> shard(static_cast<std::size_t>(mine.rows)), logits(static_cast<std::size_t>(vocab));

  std::int32_t* tokens = s.tokens.as<std::int32_t>();
  const std::uint64_t stream = rng::stream_id("generate");
  std::vector<std::int32_t> out;
  for (int i = 0; i < count; ++i) {
    // The window, padded to a multiple of the TP size (sequence parallelism splits its
    // rows); causal attention keeps the padding from changing the positions before it.
    const auto n = static_cast<int>(std::min<std::size_t>(context.size(), static_cast<std::size_t>(T)));
    const int length = std::min(T, (n + tp - 1) / tp * tp);
    std::copy(context.end() - n, context.end(), tokens);
    std::fill(tokens + n, tokens + length, 0);
    s.model.forward(tokens, nullptr, 1, length);
    const float* last = s.model.logits() + static_cast<std::size_t>(n - 1) * static_cast<std::size_t>(mine.padded_rows);
    s.dev.copy(shard.data(), last, shard.size() * sizeof(float), CopyKind::device_to_host);
    if (tp > 1) {
      s.grid.tp().all_gather_v(shard.data(), logits.data(), rows.data(), DType::f32);
    } else {
      logits = shard;
    }
    const double u = rng::uniform(s.cfg.seed, stream, static_cast<std::uint64_t>(i));
    const std::int32_t next = choose_token(logits.data(), vocab, sampling, u);
    context.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace dtrain::train
