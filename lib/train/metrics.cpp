#include "dtrain/train/metrics.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain::train {
namespace {
// JSON has no NaN/Inf: write null so every line stays parseable.
void put_number(std::ostringstream& os, double v) {
  if (std::isfinite(v)) {
    os << v;
  } else {
    os << "null";
  }
}

template <class Get>
void put_array(std::ostringstream& os, const char* key, const std::vector<MemoryUse>& m, Get get) {
  os << ",\"" << key << "\":[";
  for (std::size_t i = 0; i < m.size(); ++i) os << (i ? "," : "") << get(m[i]);
  os << "]";
}
}  // namespace

std::string to_json(const StepMetrics& m) {
  std::ostringstream os;
  os.precision(9);
  os << "{\"step\":" << m.step << ",\"loss\":";
  put_number(os, m.loss);
  if (!(m.val_loss < 0)) {  // NaN written as null
    os << ",\"val_loss\":";
    put_number(os, m.val_loss);
  }
  os << ",\"lr\":";
  put_number(os, m.lr);
  os << ",\"grad_norm\":";
  put_number(os, m.grad_norm);
  os << ",\"tokens_per_s\":";
  put_number(os, m.tokens_per_s);
  os << ",\"step_ms\":";
  put_number(os, m.step_ms);
  os << ",\"mfu\":";
  put_number(os, m.mfu);
  if (m.loss_scale > 0) {
    os << ",\"loss_scale\":";
    put_number(os, m.loss_scale);
  }
  if (m.skipped_steps >= 0) os << ",\"skipped_steps\":" << m.skipped_steps;
  put_array(os, "peak_param_bytes", m.memory_per_rank, [](const MemoryUse& u) { return u.params; });
  put_array(os, "peak_grad_bytes", m.memory_per_rank, [](const MemoryUse& u) { return u.grads; });
  put_array(os, "peak_optimizer_bytes", m.memory_per_rank, [](const MemoryUse& u) { return u.optimizer; });
  put_array(os, "peak_activation_bytes", m.memory_per_rank, [](const MemoryUse& u) { return u.activations; });
  os << "}";
  return os.str();
}

void MetricsWriter::open(const std::string& path, bool provisional) {
  if (file_) std::fclose(file_);
  file_ = nullptr;
  created_.clear();
  provisional_ = provisional;
  // Non-blocking: a named FIFO with no reader yet fails at once (ENXIO) instead of blocking
  // this rank while the others wait for it; one with a reader streams the lines. Exclusive
  // first, to know whether this call made the file (a dangling link is then made through).
  constexpr int kFlags = O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC;
  int fd = ::open(path.c_str(), kFlags | O_EXCL, 0666);
  if (fd >= 0) {
    created_ = path;
  } else if (errno == EEXIST) {
    fd = ::open(path.c_str(), kFlags, 0666);
  }
  DTRAIN_CHECK(fd >= 0, Errc::io,
               "cannot open metrics file '" << path << "': "
                   << (errno == ENXIO ? "a FIFO that no process reads" : std::strerror(errno)));
  // JSON lines appended to a checkpoint (`--metrics` given a step_*.h5) would leave it
  // unreadable to tools that check its end: refused.
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 8) {
    char head[8] = {0};
    const int reader = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const bool hdf5 = reader >= 0 && ::pread(reader, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head) &&
                      std::memcmp(head, "\x89HDF\r\n\x1a\n", sizeof head) == 0;
    if (reader >= 0) ::close(reader);
    if (hdf5) ::close(fd);
    DTRAIN_CHECK(!hdf5, Errc::io,
                 "metrics file '" << path << "' is an HDF5 file (a checkpoint?): give --metrics a file of its own");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);  // writes wait for a slow reader
  file_ = ::fdopen(fd, "a");
  const int fdopen_error = errno;
  if (!file_) ::close(fd);
  DTRAIN_CHECK(file_ != nullptr, Errc::io, "cannot open metrics file '" << path << "': " << std::strerror(fdopen_error));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
  if (provisional_ && !created_.empty()) ::unlink(created_.c_str());
}

void MetricsWriter::write(const StepMetrics& m) {
  if (!file_) return;
  const std::string line = to_json(m) + "\n";
  const bool written = std::fwrite(line.data(), 1, line.size(), file_) == line.size();
  // fflush: a killed run keeps every line it logged. A full disk loses metrics, not the run.
  if ((std::fflush(file_) != 0 || !written) && !write_failed_) {
    write_failed_ = true;
    DTRAIN_LOG(warn, "cannot write the metrics file: " << std::strerror(errno)
                     << "; training goes on, later lines may be lost");
  }
}

}  // namespace dtrain::train
