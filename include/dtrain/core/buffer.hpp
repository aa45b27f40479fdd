#pragma once
// Aligned host buffers that are allocated once and reused. Touching fresh pages is slow, so
// a buffer is pre-faulted (zeroed) when created: the cost lands at set-up, never in a step.
#include <cstddef>
#include <cstdint>

#include "dtrain/export.hpp"

namespace dtrain {

class DTRAIN_API AlignedBuffer {
 public:
  static constexpr std::size_t kAlignment = 64;

  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes, std::size_t alignment = kAlignment);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Grow-only: reallocates (and zeroes) only when more bytes are needed than held.
  // Returns true when it reallocated, so callers can count allocations.
  bool ensure(std::size_t bytes);

  void* data() noexcept { return data_; }
  const void* data() const noexcept { return data_; }
  template <class T> T* as() noexcept { return static_cast<T*>(data_); }
  template <class T> const T* as() const noexcept { return static_cast<const T*>(data_); }
  std::size_t bytes() const noexcept { return bytes_; }
  bool empty() const noexcept { return bytes_ == 0; }

  // Process-wide count of allocations made by AlignedBuffer (for "no allocation per step" tests).
  static std::uint64_t allocation_count() noexcept;

 private:
  void release() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t alignment_ = kAlignment;
};

}  // namespace dtrain
