#pragma once
// Reading a stretch of a file held open, for the readers that keep a descriptor (data files,
// safetensors files) and tell a file that shrank under them from a failed read.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace dtrain {

// pread until `bytes` bytes at `offset` are in `out` (restarted after a signal), or the end of
// the file comes first. Returns the bytes read, fewer at the end of the file; -1 with errno
// set when a read fails.
ssize_t pread_all(int fd, void* out, std::size_t bytes, std::uint64_t offset) noexcept;

}  // namespace dtrain
