#pragma once
// Every rank reads a checkpoint through its own view of the path: a node may see a damaged,
// truncated or other copy of the file (a node-local disk, a stale cache). HDF5 opens and
// reads collectively, and a rank whose copy fails inside one of its collective calls leaves
// the others waiting there, so the ranks first agree that they see the same file: its size
// and the bytes of its first and last 64 KiB (where HDF5 keeps the superblock and, for
// files written at once, most of the metadata). A difference in the middle of the data is
// what the datasets' checksums catch.
#include <cstdint>
#include <string>

namespace dtrain {
class Communicator;
}

namespace dtrain::ckpt {

struct FileFingerprint {
  std::uint64_t bytes = 0;  // the file's size
  std::uint64_t hash = 0;   // of its first and last 64 KiB
};

// Throws Error(Errc::io) when the file cannot be read.
FileFingerprint file_fingerprint(const std::string& path);

// Collective over world: throws the same Error(Errc::corrupt_data) on every rank, naming the
// first rank whose fingerprint differs from world rank 0's, when they are not all the same.
void require_same_file(Communicator& world, const std::string& path, const FileFingerprint& mine);

}  // namespace dtrain::ckpt
