// Choosing a token from logits, for programs that generate text with dt_gpt_decode.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "dtrain/train/sampling.hpp"
#include "guard.hpp"

using namespace dtrain::capi;

extern "C" {

dt_result_t dt_sample_token(const float* logits, int vocab, const dt_sampling_config_t* config,
                            double uniform, int32_t* token) {
  return call_free(__func__, [&] {
    need_ptr(logits, "logits");
    need_ptr(token, "token");
    need(vocab >= 1, "vocab must be at least 1");
    need(uniform >= 0.0 && uniform < 1.0, "uniform must be in [0, 1)");
    dt_sampling_config_t c = DT_SAMPLING_CONFIG_INIT;
    if (config) {
      // Fields are only ever appended: an older caller's smaller struct leaves the rest default.
      need(config->struct_size >= offsetof(dt_sampling_config_t, top_p) + sizeof(double),
           "config->struct_size is too small: initialise it with DT_SAMPLING_CONFIG_INIT");
      std::memcpy(&c, config, std::min(config->struct_size, sizeof c));
    }
    need(c.temperature >= 0 && std::isfinite(c.temperature), "temperature must be finite and >= 0");
    need(c.top_k >= 0, "top_k must be >= 0 (0: every token)");
    need(c.top_p > 0 && c.top_p <= 1, "top_p must be in (0, 1]");
    dtrain::train::SamplingConfig s;
    s.temperature = c.temperature;
    s.top_k = c.top_k;
    s.top_p = c.top_p;
    *token = dtrain::train::choose_token(logits, vocab, s, uniform);
  });
}

}  // extern "C"
