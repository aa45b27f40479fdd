#pragma once
// Choosing a model's next token from one row of its logits (text generation).
#include "dtrain/export.hpp"

namespace dtrain::train {

struct DTRAIN_API SamplingConfig {
  double temperature = 1.0;  // 0: always the most likely token
  int top_k = 0;             // > 0: draw among the k most likely tokens only; 0: all
  double top_p = 1.0;        // < 1: among the fewest most likely tokens whose probabilities
                             // add up to at least top_p (nucleus sampling); 1: all
};

// temperature 0: the most likely token (the lowest id among equals). Otherwise the token
// drawn from softmax(logits / temperature), restricted to the top_k most likely tokens when
// top_k > 0, then to the fewest most likely of those whose probabilities (renormalised over
// them) add up to at least top_p: the first token, in decreasing probability, at which the
// cumulative probability of the kept tokens exceeds uniform (a number in [0, 1)); a token
// of probability 0 (a -inf logit) is never drawn. Throws Error(Errc::invalid_argument) for
// vocab < 1, top_p outside (0, 1], a temperature that is negative or not finite, top_k < 0,
// uniform outside [0, 1), a NaN logit or an infinite largest one.
DTRAIN_API int choose_token(const float* logits, int vocab, const SamplingConfig& cfg,
                            double uniform);

}  // namespace dtrain::train
