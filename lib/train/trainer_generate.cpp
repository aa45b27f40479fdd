// Text generation from the trained model: the next token is chosen from the logits of the
// last position of the last seq-len tokens (fewer while the text is shorter), computed with
// the model's key/value cache (GptModel::decode).
#include <algorithm>
#include <vector>

#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/rng.hpp"
#include "dtrain/nn/tensor_parallel.hpp"
#include "trainer_state.hpp"

namespace dtrain::train {

std::vector<std::int32_t> Trainer::generate(std::vector<std::int32_t> context, int count,
                                            const SamplingConfig& sampling,
                                            const std::function<void(std::int32_t)>& on_token) {
  State& s = *s_;
  DTRAIN_CHECK(count >= 0, Errc::invalid_argument, "generate: count must be >= 0, got " << count);
  const int vocab = s.cfg.vocab, T = s.cfg.seq_len;
  if (count == 0) return {};
  {  // before the first collective: a bad prompt or no memory for the key/value cache on one
     // rank fails every rank instead of leaving the others waiting in a decode
    LocalFailure failed;
    try {
      for (const std::int32_t t : context) {
        DTRAIN_CHECK(t >= 0 && t < vocab, Errc::invalid_argument,
                     "prompt token " << t << " is outside the vocabulary [0, " << vocab << ")");
      }
      s.model.reserve_decode(true);
    } catch (const std::exception& e) {
      failed.record(e);
    }
    failed.agree(s.world, "generate");
  }
  // A token is one row's forward: without this, five times the time a token on the CPU for
  // GPT-2 124M under 16-bit parameter storage.
  const auto held = s.hold_parameters_if_they_fit();
  if (context.empty()) {  // start from a token of the data: validation sample 0's first
    // The sample as evaluation draws it (seq-len + 1 tokens: the window decides its place).
    std::vector<std::int32_t> sample(static_cast<std::size_t>(T) + 1);
    s.source->sample(Split::val, 0, T + 1, sample.data());
    context.push_back(sample[0]);
  }

  // The logits' columns are this TP rank's vocabulary rows; the group gathers whole rows.
  const nn::VocabShard& mine = s.model.vocab_shard();
  const int tp = s.grid.tp_size();
  std::vector<std::size_t> rows(static_cast<std::size_t>(tp));
  for (int r = 0; r < tp; ++r) rows[static_cast<std::size_t>(r)] = static_cast<std::size_t>(nn::vocab_shard(vocab, tp, r).rows);
  std::vector<float> shard(static_cast<std::size_t>(mine.rows)), logits(static_cast<std::size_t>(vocab));

  // The model's key/value cache holds the text from its last restart. While the text fits in
  // seq-len, a new token costs a forward over its one row; beyond, the window of the last
  // seq-len tokens moves by one, every position changes, and the cache starts again. With
  // pipeline stages the rows pass through them; the last stage chooses the token and
  // tells the others.
  auto decode = [&](const std::int32_t* tokens, int n) {
    return s.pipeline ? s.pipeline->decode(tokens, n) : s.model.decode(tokens, n);
  };
  auto restart = [&] {
    const auto n = std::min<std::size_t>(context.size(), static_cast<std::size_t>(T));
    s.model.decode_reset();
    return decode(context.data() + context.size() - n, static_cast<int>(n));
  };
  const int last_stage = s.grid.pp_size() - 1;
  const bool chooses = s.grid.pp_rank() == last_stage;
  const float* last = restart();
  const std::uint64_t stream = rng::stream_id("generate");
  std::vector<std::int32_t> out;
  for (int i = 0; i < count; ++i) {
    std::int32_t next = 0;
    LocalFailure refused;
    if (chooses) {
      s.dev.copy(shard.data(), last, shard.size() * sizeof(float), CopyKind::device_to_host);
      if (tp > 1) {
        s.grid.tp().all_gather_v(shard.data(), logits.data(), rows.data(), DType::f32);
      } else {
        logits = shard;
      }
      const double u = rng::uniform_open(s.cfg.seed, stream, static_cast<std::uint64_t>(i));
      try {
        next = choose_token(logits.data(), vocab, sampling, u);
      } catch (const std::exception& e) {
        refused.record(e);  // a diverged model's logits
      }
    }
    // The other stages wait for the token: they fail with the last stage instead.
    refused.agree(s.grid.pp(), "generate");
    if (s.pipeline) s.grid.pp().broadcast(&next, &next, 1, DType::i32, last_stage);
    context.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
    if (i + 1 < count) last = s.model.decoded_length() < T ? decode(&next, 1) : restart();
  }
  return out;
}

}  // namespace dtrain::train
