/* 16-bit values for the C tests of mixed precision: floats rounded to bf16 or fp16 (kept in a
 * float), and their 16-bit words. fmt/precision is "bf16" or "fp16". */
#ifndef DTRAIN_TESTS_HALF_WORDS_H
#define DTRAIN_TESTS_HALF_WORDS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* x rounded to nearest even with `bits` significant bits (bf16 8, fp16 11), kept in a float;
 * fp16's subnormals (below 2^-14) are multiples of 2^-24. */
static inline float round_bits(float x, int bits, int subnormal_below) {
  int e = 0;
  float f;
  if (fabsf(x) < ldexpf(1.0f, subnormal_below)) return ldexpf(nearbyintf(ldexpf(x, bits - 1 - subnormal_below)), subnormal_below - bits + 1);
  f = frexpf(x, &e); /* x = f * 2^e, 0.5 <= |f| < 1 */
  return ldexpf(nearbyintf(ldexpf(f, bits)), e - bits);
}
static inline float round_to(const char* precision, float x) {
  return strcmp(precision, "bf16") == 0 ? round_bits(x, 8, -126) : round_bits(x, 11, -14);
}

/* x (a value of fmt, e.g. from round_to) as its 16-bit word, and back. */
static inline uint16_t encode16(const char* fmt, float x) {
  uint32_t u;
  if (strcmp(fmt, "bf16") == 0) {
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16);
  }
  {
    const uint16_t sign = x < 0 ? 0x8000u : 0;
    const float a = fabsf(x);
    int e = 0;
    if (a < ldexpf(1.0f, -14)) return (uint16_t)(sign | (uint16_t)ldexpf(a, 24)); /* subnormal */
    frexpf(a, &e); /* a = f * 2^e, 0.5 <= f < 1: exponent e - 1 */
    return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(ldexpf(a, 11 - e) - 1024.0f));
  }
}
static inline float decode16(const char* fmt, uint16_t h) {
  if (strcmp(fmt, "bf16") == 0) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
  }
  {
    const int e = (h >> 10) & 31, m = h & 1023;
    const float a = e == 0 ? ldexpf((float)m, -24) : ldexpf(1024.0f + (float)m, e - 25);
    return (h & 0x8000u) ? -a : a;
  }
}

/* What a program computing in fp16 stores for x: its word, inf beyond fp16's largest value. */
static inline uint16_t fp16_word(float x) {
  const float r = round_to("fp16", x);
  if (fabsf(r) > 65504.0f) return x < 0 ? 0xFC00u : 0x7C00u;
  return encode16("fp16", r);
}

#endif
