#pragma once
// CPU stand-in for cub::DeviceRadixSort::SortPairs (see cuda_runtime.h here): a stable sort
// of (key, value) pairs by the key bits [begin_bit, end_bit), signed keys in numeric order,
// with CUB's two-call protocol for the temporary storage.
#include <algorithm>
#include <cstddef>
#include <numeric>
#include <type_traits>
#include <vector>

#include "../../cuda_runtime.h"

namespace cub {

struct DeviceRadixSort {
  template <class K, class V>
  static cudaError_t SortPairs(void* temp, std::size_t& temp_bytes, const K* keys_in,
                               K* keys_out, const V* values_in, V* values_out, int n,
                               int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t stream = nullptr) {
    static_assert(std::is_integral<K>::value, "integer keys only");
    const std::size_t needed = 256 + 2 * static_cast<std::size_t>(n < 0 ? 0 : n) * sizeof(K);
    if (temp == nullptr) {
      temp_bytes = needed;
      return cudaSuccess;
    }
    if (n < 0 || temp_bytes < needed || begin_bit < 0 || end_bit > static_cast<int>(sizeof(K) * 8) ||
        begin_bit >= end_bit)
      return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    const std::size_t bytes_k = sizeof(K) * n, bytes_v = sizeof(V) * n;
    if (!dtrain_emu::device_range_ok(temp, temp_bytes, "SortPairs temporary storage") ||
        !dtrain_emu::device_range_ok(keys_in, bytes_k, "SortPairs keys_in") ||
        !dtrain_emu::device_range_ok(keys_out, bytes_k, "SortPairs keys_out") ||
        !dtrain_emu::device_range_ok(values_in, bytes_v, "SortPairs values_in") ||
        !dtrain_emu::device_range_ok(values_out, bytes_v, "SortPairs values_out"))
      return cudaErrorInvalidValue;
    dtrain_emu::enqueue(stream, [=] {
      using U = std::make_unsigned_t<K>;
      const U sign = std::is_signed<K>::value ? U(U(1) << (sizeof(K) * 8 - 1)) : U(0);
      const int width = end_bit - begin_bit;
      const U field = width >= static_cast<int>(sizeof(U) * 8) ? U(~U(0)) : U((U(1) << width) - 1);
      auto digit = [&](K key) { return U((U(key) ^ sign) >> begin_bit) & field; };
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return digit(keys_in[a]) < digit(keys_in[b]); });
      std::vector<K> keys(n);
      std::vector<V> values(n);
      for (int i = 0; i < n; ++i) {
        keys[i] = keys_in[order[i]];
        values[i] = values_in[order[i]];
      }
      std::copy(keys.begin(), keys.end(), keys_out);
      std::copy(values.begin(), values.end(), values_out);
    });
    return cudaSuccess;
  }
};

}  // namespace cub
