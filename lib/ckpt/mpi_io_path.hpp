#pragma once
// Paths MPI-IO can open. Open MPI's ompio copies a file's path plus ".locktest.<rank>" into
// a 256-byte buffer whenever it opens a file (its sharedfp "lockedfile" component, in every
// release to date), so a longer path overflows it and the process aborts with "buffer
// overflow detected". Checkpoint paths are checked against that limit before any open.
#include <cstddef>
#include <string>

namespace dtrain::ckpt {

// The longest path MPI-IO opens over `ranks` processes here: with Open MPI,
// 255 - strlen(".locktest.") - digits(ranks - 1); with any other MPI, no limit (SIZE_MAX).
std::size_t longest_mpi_io_path(int ranks);

// Throws Error(Errc::io) naming the path and the limit when path is longer.
void check_mpi_io_path(const std::string& path, int ranks);

}  // namespace dtrain::ckpt
