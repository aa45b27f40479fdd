#pragma once
// Aligned host buffers that are allocated once and reused. Touching fresh pages is slow, so
// a buffer is pre-faulted (zeroed) when created: the cost lands at set-up, never in a step.
// A buffer made with Faulting::on_use instead maps fresh zero pages from the kernel and
// leaves them untouched, for memory that may never be used whole on this rank (a ZeRO-3
// arena holds only its pieces): a page costs memory only once it is written.
#include <cstddef>
#include <cstdint>

#include "dtrain/export.hpp"

namespace dtrain {

enum class Faulting { now, on_use };

class DTRAIN_API AlignedBuffer {
 public:
  static constexpr std::size_t kAlignment = 64;

  AlignedBuffer() = default;
  // on_use: page-aligned whatever `alignment` says (it may be at most a page).
  explicit AlignedBuffer(std::size_t bytes, std::size_t alignment = kAlignment,
                         Faulting faulting = Faulting::now);
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
  Faulting faulting_ = Faulting::now;
  std::size_t mapped_bytes_ = 0;  // on_use: the length of the mapping
};

}  // namespace dtrain
