// Token and position embeddings. The token table may be one vocab-parallel shard holding rows
// [vocab_start, vocab_start + vocab_rows): other tokens give zero rows here and are supplied
// by the shard that owns them (a sum over shards then rebuilds the full lookup).
#include <cstring>

#include "device/cpu/kernels.hpp"

namespace dtrain::cpu {

template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, int N, int C,
                       int vocab_start, int vocab_rows) {
  for (int n = 0; n < N; ++n) {
    T* o = out + static_cast<std::int64_t>(n) * C;
    const std::int64_t row = static_cast<std::int64_t>(tokens[n]) - vocab_start;
    if (row >= 0 && row < vocab_rows)
      std::memcpy(o, wte + row * C, sizeof(T) * static_cast<std::size_t>(C));
    else
      std::memset(o, 0, sizeof(T) * static_cast<std::size_t>(C));
  }
}

template <class T>
void embedding_backward(T* dwte, const T* dout, const std::int32_t* tokens, int N, int C,
                        int vocab_start, int vocab_rows) {
  // Serial: several positions may hit the same row, and N*C is tiny next to the GEMMs.
  for (int n = 0; n < N; ++n) {
    const std::int64_t row = static_cast<std::int64_t>(tokens[n]) - vocab_start;
    if (row < 0 || row >= vocab_rows) continue;
    const T* d = dout + static_cast<std::int64_t>(n) * C;
    T* g = dwte + row * C;
    for (int c = 0; c < C; ++c) g[c] += d[c];
  }
}

template <class T> void positional_forward(T* out, const T* wpe, int B, int T_, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T_; ++t) {
      T* o = out + (static_cast<std::int64_t>(b) * T_ + t) * C;
      const T* p = wpe + static_cast<std::int64_t>(t) * C;
      for (int c = 0; c < C; ++c) o[c] += p[c];
    }
}

template <class T> void positional_backward(T* dwpe, const T* dout, int B, int T_, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T_; ++t) {
      const T* d = dout + (static_cast<std::int64_t>(b) * T_ + t) * C;
      T* g = dwpe + static_cast<std::int64_t>(t) * C;
      for (int c = 0; c < C; ++c) g[c] += d[c];
    }
}

#define DTRAIN_INSTANTIATE(T)                                                                 \
  template void embedding_forward<T>(T*, const std::int32_t*, const T*, int, int, int, int);  \
  template void embedding_backward<T>(T*, const T*, const std::int32_t*, int, int, int, int); \
  template void positional_forward<T>(T*, const T*, int, int, int);                           \
  template void positional_backward<T>(T*, const T*, int, int, int);
DTRAIN_INSTANTIATE(float)
DTRAIN_INSTANTIATE(double)
#undef DTRAIN_INSTANTIATE

}  // namespace dtrain::cpu
