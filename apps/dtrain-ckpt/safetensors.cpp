// export: the /model tensors of a checkpoint as one safetensors file, which PyTorch
// (safetensors.torch.load_file) and plain numpy read without dtrain:
//   8 bytes  little-endian u64: length N of the header
//   N bytes  JSON {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [...],
//            "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8
//   then     the tensors' bytes, little-endian, row-major, back to back in header order
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "dtrain/ckpt/checksum.hpp"
#include "dtrain/ckpt/file.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain_ckpt {
namespace {

const char* const kModelPrefix = "/model/";

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool little_endian_host() {
  const std::uint32_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// The bytes of `data` in little-endian order whatever the host's.
void to_little_endian(std::vector<float>& data) {
  if (little_endian_host()) return;
  for (float& f : data) {
    unsigned char b[4];
    std::memcpy(b, &f, 4);
    std::swap(b[0], b[3]);
    std::swap(b[1], b[2]);
    std::memcpy(&f, b, 4);
  }
}

// A new file next to `out` (mkstemp: never an existing file, never through a link, so OUT.tmp
// or a link there is not written into), renamed over `out` by commit() and removed unless
// committed: a failed export leaves no half-written file.
class NewFileNextTo {
 public:
  explicit NewFileNextTo(const std::string& out) : out_(out), tmp_(out + ".XXXXXX") {
    const int fd = ::mkstemp(tmp_.data());
    DTRAIN_CHECK(fd >= 0, Errc::io, "cannot create a file next to '" << out_ << "': " << std::strerror(errno));
    const mode_t mask = ::umask(0);  // mkstemp makes 0600: the permissions a new file gets
    ::umask(mask);
    ::fchmod(fd, 0666 & ~mask);
    file_ = ::fdopen(fd, "wb");
    if (!file_) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp_.c_str());
      DTRAIN_FAIL(Errc::io, "cannot write '" << out_ << "': " << std::strerror(err));
    }
  }
  ~NewFileNextTo() {
    if (file_) std::fclose(file_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  NewFileNextTo(const NewFileNextTo&) = delete;
  NewFileNextTo& operator=(const NewFileNextTo&) = delete;

  void write(const void* data, std::size_t bytes) {
    DTRAIN_CHECK(std::fwrite(data, 1, bytes, file_) == bytes, Errc::io,
                 "cannot write '" << out_ << "': " << std::strerror(errno));
  }
  void commit() {
    std::FILE* f = file_;
    file_ = nullptr;
    // Buffered data reaches the file only here: a full disk shows up now.
    DTRAIN_CHECK(std::fclose(f) == 0, Errc::io, "cannot write '" << out_ << "': " << std::strerror(errno));
    DTRAIN_CHECK(std::rename(tmp_.c_str(), out_.c_str()) == 0, Errc::io,
                 "cannot rename '" << tmp_ << "' to '" << out_ << "': " << std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string out_, tmp_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

}  // namespace

int export_safetensors(const std::string& file, const std::string& out) {
  namespace ck = dtrain::ckpt;
  const ck::CheckpointFile f(file);
  std::vector<const ck::DatasetInfo*> tensors;
  for (const ck::DatasetInfo& d : f.datasets()) {
    if (d.path.rfind(kModelPrefix, 0) != 0) continue;
    DTRAIN_CHECK(d.dtype == "float32", Errc::invalid_argument,
                 "dataset " << d.path << " is " << d.dtype << ", not float32");
    tensors.push_back(&d);
  }
  DTRAIN_CHECK(!tensors.empty(), Errc::invalid_argument, "'" << file << "' has no /model tensors");

  // Provenance as string metadata (safetensors allows only strings there).
  std::ostringstream json;
  json << "{\"__metadata__\":{";
  bool first = true;
  for (const char* object : {"/", "/model"}) {
    for (const auto& [name, value] : f.attributes(object)) {
      if (name == "run_config" || name == "checksum_algorithm") continue;
      json << (first ? "" : ",") << json_string(name) << ":" << json_string(value);
      first = false;
    }
  }
  json << "}";
  std::uint64_t offset = 0;
  for (const ck::DatasetInfo* d : tensors) {
    std::uint64_t bytes = 4;
    json << "," << json_string(d->path.substr(std::strlen(kModelPrefix))) << ":{\"dtype\":\"F32\",\"shape\":[";
    for (std::size_t i = 0; i < d->shape.size(); ++i) {
      json << (i ? "," : "") << d->shape[i];
      bytes *= d->shape[i];
    }
    json << "],\"data_offsets\":[" << offset << "," << offset + bytes << "]}";
    offset += bytes;
  }
  json << "}";
  std::string header = json.str();
  header.append((8 - header.size() % 8) % 8, ' ');

  namespace fs = std::filesystem;
  std::error_code same_ec, type_ec;
  DTRAIN_CHECK(!fs::equivalent(file, out, same_ec), Errc::invalid_argument,
               "'" << out << "' is the checkpoint itself: export to another file");
  const fs::file_status existing = fs::status(out, type_ec);
  DTRAIN_CHECK(!fs::exists(existing) || fs::is_regular_file(existing), Errc::invalid_argument,
               "'" << out << "' exists and is not a regular file: export to a file");
  // A damaged tensor is not exported as if it were the model's: each is checked against its
  // checksum, in a format this tool knows.
  const std::string problem = format_problem(f);
  DTRAIN_CHECK(problem.empty(), Errc::invalid_argument, "'" << file << "': " << problem << ": nothing exported");
  NewFileNextTo os(out);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
  os.write(len, 8);
  os.write(header.data(), header.size());
  for (const ck::DatasetInfo* d : tensors) {
    std::vector<float> data = f.read(d->path);
    DTRAIN_CHECK(d->has_checksum && ck::checksum_run(data.data(), data.size(), 0) == d->checksum,
                 Errc::corrupt_data, "dataset " << d->path << (d->has_checksum ? " fails its" : " has no")
                                                << " checksum: '" << file << "' is damaged, nothing exported");
    to_little_endian(data);
    os.write(data.data(), data.size() * sizeof(float));
  }
  os.commit();
  std::printf("exported %zu tensors (%llu bytes of data) to %s\n", tensors.size(),
              static_cast<unsigned long long>(offset), out.c_str());
  return 0;
}

}  // namespace dtrain_ckpt
