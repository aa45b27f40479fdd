#include "ckpt/mpi_io_path.hpp"

#include "dtrain/comm/mpi_interop.hpp"

#include <cstring>

#include "dtrain/core/error.hpp"

namespace dtrain::ckpt {
namespace {

bool is_open_mpi() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  return std::strncmp(version, "Open MPI", 8) == 0;
}

}  // namespace

std::size_t longest_mpi_io_path(int ranks) {
  static const bool open_mpi = is_open_mpi();
  if (!open_mpi) return static_cast<std::size_t>(-1);
  std::size_t digits = 1;
  for (int r = ranks - 1; r >= 10; r /= 10) ++digits;
  return 255 - std::strlen(".locktest.") - digits;
}

void check_mpi_io_path(const std::string& path, int ranks) {
  const std::size_t limit = longest_mpi_io_path(ranks);
  DTRAIN_CHECK(path.size() <= limit, Errc::io,
               "checkpoint path '" << path << "' is " << path.size() << " characters: Open MPI's "
               "MPI-IO aborts on paths longer than " << limit << " at " << ranks
               << " ranks (a fixed 256-byte buffer in its ompio layer); use a shorter directory "
                  "path (a relative one, or a link)");
}

}  // namespace dtrain::ckpt
