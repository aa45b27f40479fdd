#include "dtrain/core/buffer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {
std::atomic<std::uint64_t> g_allocations{0};
}

namespace {
std::size_t page_size() {
  static const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// "3365699648 bytes (3.13 GiB) of host memory: Cannot allocate memory"
std::string what_failed(std::size_t bytes, int error) {
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.2f", static_cast<double>(bytes) / (1ull << 30));
  return std::to_string(bytes) + " bytes (" + gib + " GiB) of host memory: " + std::strerror(error);
}
}  // namespace

AlignedBuffer::AlignedBuffer(std::size_t bytes, std::size_t alignment, Faulting faulting)
    : alignment_(alignment), faulting_(faulting) {
  DTRAIN_CHECK(alignment >= sizeof(void*) && (alignment & (alignment - 1)) == 0,
               Errc::invalid_argument, "alignment " << alignment << " is not a power of two");
  DTRAIN_CHECK(faulting == Faulting::now || alignment <= page_size(), Errc::invalid_argument,
               "alignment " << alignment << " is larger than a page");
  ensure(bytes);
}

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      alignment_(o.alignment_),
      faulting_(o.faulting_),
      mapped_bytes_(std::exchange(o.mapped_bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    alignment_ = o.alignment_;
    faulting_ = o.faulting_;
    mapped_bytes_ = std::exchange(o.mapped_bytes_, 0);
  }
  return *this;
}

bool AlignedBuffer::ensure(std::size_t bytes) {
  if (bytes <= bytes_) return false;
  release();
  if (faulting_ == Faulting::on_use) {
    // Fresh anonymous pages read as zero and take memory only once written.
    const std::size_t length = (bytes + page_size() - 1) / page_size() * page_size();
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const int error = errno;  // before the message's allocations
    DTRAIN_CHECK(p != MAP_FAILED, Errc::out_of_memory, "cannot map " << what_failed(bytes, error));
    data_ = p;
    bytes_ = bytes;
    mapped_bytes_ = length;
    ++g_allocations;
    return true;
  }
  // Round up so aligned_alloc's size contract holds.
  const std::size_t rounded = (bytes + alignment_ - 1) / alignment_ * alignment_;
  void* p = nullptr;
  if (const int error = posix_memalign(&p, alignment_, rounded); error != 0 || p == nullptr) {
    DTRAIN_FAIL(Errc::out_of_memory, "cannot allocate " << what_failed(bytes, error ? error : ENOMEM));
  }
  std::memset(p, 0, rounded);  // pre-fault now, not in the first step
  data_ = p;
  bytes_ = bytes;
  ++g_allocations;
  return true;
}

void AlignedBuffer::release() noexcept {
  if (mapped_bytes_ > 0) {
    munmap(data_, mapped_bytes_);
    mapped_bytes_ = 0;
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  bytes_ = 0;
}

std::uint64_t AlignedBuffer::allocation_count() noexcept { return g_allocations.load(); }

}  // namespace dtrain
