#pragma once
// A non-owning view of a block of device memory: pointer, shape (up to 4 dims), element type
// and the kind of device the memory lives on. Buffers are owned elsewhere (arenas, pools);
// a Tensor only names a region of them, so making one never allocates.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "dtrain/core/dtype.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

enum class DeviceKind : int { cpu = 0, cuda = 1 };

DTRAIN_API const char* device_kind_name(DeviceKind kind) noexcept;

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  std::array<std::int64_t, kMaxDims> shape{};  // unused trailing dims are 0
  int ndim = 0;
  DType dtype = DType::f32;
  DeviceKind device = DeviceKind::cpu;

  Tensor() = default;
  Tensor(void* ptr, std::initializer_list<std::int64_t> dims, DType type = DType::f32,
         DeviceKind kind = DeviceKind::cpu)
      : data(ptr), dtype(type), device(kind) {
    DTRAIN_CHECK(dims.size() <= static_cast<std::size_t>(kMaxDims), Errc::invalid_argument,
                 "Tensor: at most " << kMaxDims << " dims, got " << dims.size());
    for (std::int64_t d : dims) {
      DTRAIN_CHECK(d >= 0, Errc::invalid_argument, "Tensor: negative dimension " << d);
      shape[ndim++] = d;
    }
  }

  std::int64_t dim(int i) const { return shape[i]; }
  std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(numel()) * dtype_size(dtype);
  }
  template <class T> T* as() const noexcept { return static_cast<T*>(data); }
};

}  // namespace dtrain
