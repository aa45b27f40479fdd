#include "dtrain/core/buffer.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {
std::atomic<std::uint64_t> g_allocations{0};
}

AlignedBuffer::AlignedBuffer(std::size_t bytes, std::size_t alignment) : alignment_(alignment) {
  DTRAIN_CHECK(alignment >= sizeof(void*) && (alignment & (alignment - 1)) == 0,
               Errc::invalid_argument, "alignment " << alignment << " is not a power of two");
  ensure(bytes);
}

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      alignment_(o.alignment_) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    alignment_ = o.alignment_;
  }
  return *this;
}

bool AlignedBuffer::ensure(std::size_t bytes) {
  if (bytes <= bytes_) return false;
  release();
  // Round up so aligned_alloc's size contract holds.
  const std::size_t rounded = (bytes + alignment_ - 1) / alignment_ * alignment_;
  void* p = nullptr;
  if (posix_memalign(&p, alignment_, rounded) != 0 || p == nullptr) {
    DTRAIN_FAIL(Errc::out_of_memory, "cannot allocate " << bytes << " bytes of host memory");
  }
  std::memset(p, 0, rounded);  // pre-fault now, not in the first step
  data_ = p;
  bytes_ = bytes;
  ++g_allocations;
  return true;
}

void AlignedBuffer::release() noexcept {
  std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

std::uint64_t AlignedBuffer::allocation_count() noexcept { return g_allocations.load(); }

}  // namespace dtrain
