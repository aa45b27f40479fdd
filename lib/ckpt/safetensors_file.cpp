#include "ckpt/safetensors_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <cstring>

#include "core/json_value.hpp"
#include "core/pread_all.hpp"
#include "dtrain/core/dtype.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::ckpt {
namespace {

// Bytes per element of the dtypes safetensors defines; 0 for a name it does not.
std::uint64_t element_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

// Little-endian words, whatever the host's order.
std::uint64_t little_endian(const unsigned char* b, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

// The header limit safetensors itself sets (100 MB), so a damaged length is not allocated.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DTRAIN_CHECK(fd_.fd >= 0, Errc::io, "cannot open '" << path << "': " << std::strerror(errno));
  struct stat st {};
  DTRAIN_CHECK(::fstat(fd_.fd, &st) == 0 && S_ISREG(st.st_mode), Errc::io, "'" << path << "' is not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const std::string what = "'" + path + "' (safetensors)";
  DTRAIN_CHECK(size >= 8, Errc::corrupt_data, what << " is shorter than its 8-byte header length");
  unsigned char len[8];
  read_bytes(len, 8, 0);
  const std::uint64_t n = little_endian(len, 8);
  DTRAIN_CHECK(n <= size - 8 && n <= kMaxHeaderBytes, Errc::corrupt_data,
               what << " gives a header of " << n << " bytes, which the file of " << size << " bytes cannot hold");
  std::string header(n, '\0');
  read_bytes(header.data(), n, 8);
  data_start_ = 8 + n;
  const std::uint64_t data_bytes = size - data_start_;

  const json::Value root = json::parse(header, what + " header");
  DTRAIN_CHECK(root.kind == json::Value::Kind::object, Errc::corrupt_data, what << ": the header is not a JSON object");
  for (const auto& [name, v] : root.members) {
    const std::string where = what + ", tensor '" + name + "'";
    if (name == "__metadata__") {
      DTRAIN_CHECK(v.kind == json::Value::Kind::object, Errc::corrupt_data, what << ": __metadata__ is not an object");
      for (const auto& [key, value] : v.members) {
        DTRAIN_CHECK(value.kind == json::Value::Kind::string, Errc::corrupt_data,
                     what << ": __metadata__ '" << key << "' is not a string");
        metadata_.emplace_back(key, value.text);
      }
      continue;
    }
    DTRAIN_CHECK(v.kind == json::Value::Kind::object, Errc::corrupt_data, where << " is not an object");
    const json::Value* dtype = v.find("dtype");
    const json::Value* shape = v.find("shape");
    const json::Value* offsets = v.find("data_offsets");
    DTRAIN_CHECK(dtype && dtype->kind == json::Value::Kind::string, Errc::corrupt_data, where << " has no dtype");
    DTRAIN_CHECK(shape && shape->kind == json::Value::Kind::array, Errc::corrupt_data, where << " has no shape");
    DTRAIN_CHECK(offsets && offsets->kind == json::Value::Kind::array && offsets->items.size() == 2,
                 Errc::corrupt_data, where << " has no data_offsets [begin, end]");
    SafetensorsTensor t;
    t.name = name;
    t.dtype = dtype->text;
    const std::uint64_t bytes = element_bytes(t.dtype);
    DTRAIN_CHECK(bytes > 0, Errc::corrupt_data, where << " has the unknown dtype '" << t.dtype << "'");
    std::uint64_t numel = 1;
    bool empty = false, beyond = false;  // a dimension of 0; more elements than the file has bytes
    for (const json::Value& d : shape->items) {
      const std::uint64_t n = json::to_u64(d, where + ": a dimension");
      t.shape.push_back(n);
      if (n == 0) empty = true;
      else if (numel > data_bytes / n) beyond = true;  // (stops before the count overflows)
      else numel *= n;
    }
    if (empty) numel = 0;
    DTRAIN_CHECK(!beyond || empty, Errc::corrupt_data, where << " has more elements than the file has bytes");
    t.begin = json::to_u64(offsets->items[0], where + ": data_offsets");
    t.end = json::to_u64(offsets->items[1], where + ": data_offsets");
    DTRAIN_CHECK(t.begin <= t.end && t.end <= data_bytes, Errc::corrupt_data,
                 where << ": its data_offsets [" << t.begin << ", " << t.end << "] lie outside the "
                       << data_bytes << " bytes of data (a truncated file?)");
    DTRAIN_CHECK(t.end - t.begin == numel * bytes, Errc::corrupt_data,
                 where << " holds " << t.end - t.begin << " bytes for " << numel << " elements of " << t.dtype);
    tensors_.push_back(std::move(t));
  }
}

SafetensorsFile::Descriptor::~Descriptor() {
  if (fd >= 0) ::close(fd);
}

SafetensorsFile::~SafetensorsFile() = default;

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  for (const SafetensorsTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsFile::read_bytes(void* dst, std::uint64_t bytes, std::uint64_t offset) const {
  const ssize_t got = pread_all(fd_.fd, dst, bytes, offset);
  DTRAIN_CHECK(got >= 0, Errc::io, "reading '" << path_ << "' at byte " << offset << ": " << std::strerror(errno));
  DTRAIN_CHECK(static_cast<std::uint64_t>(got) == bytes, Errc::corrupt_data,
               "reading '" << path_ << "' at byte " << offset + got << ": the file is shorter than when it was opened");
}

std::vector<float> SafetensorsFile::read(const SafetensorsTensor& t) const {
  const int bytes = static_cast<int>(element_bytes(t.dtype));
  const bool floating = t.dtype == "F64" || t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16";
  DTRAIN_CHECK(floating, Errc::invalid_argument,
               "'" << path_ << "', tensor '" << t.name << "' is " << t.dtype << ", not a floating-point type");
  const std::uint64_t n = (t.end - t.begin) / static_cast<std::uint64_t>(bytes);
  std::vector<float> out(n);
  // In blocks of 1 Mi elements: the raw bytes never need a second whole-tensor buffer.
  constexpr std::uint64_t kBlock = 1 << 20;
  std::vector<unsigned char> raw(std::min(n, kBlock) * static_cast<std::uint64_t>(bytes));
  for (std::uint64_t first = 0; first < n; first += kBlock) {
    const std::uint64_t count = std::min(kBlock, n - first);
    read_bytes(raw.data(), count * bytes, data_start_ + t.begin + first * bytes);
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t w = little_endian(raw.data() + i * bytes, bytes);
      float& v = out[first + i];
      if (t.dtype == "F32") {
        v = bits_float(static_cast<std::uint32_t>(w));
      } else if (t.dtype == "BF16") {
        v = bf16_bits_to_f32(static_cast<std::uint16_t>(w));
      } else if (t.dtype == "F16") {
        v = f16_bits_to_f32(static_cast<std::uint16_t>(w));
      } else {
        double d;
        std::memcpy(&d, &w, sizeof d);
        const bool beyond = std::fabs(d) > std::numeric_limits<float>::max() && std::isfinite(d);
        v = beyond ? std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(d > 0 ? 1 : -1))
                   : static_cast<float>(d);
      }
    }
  }
  return out;
}

}  // namespace dtrain::ckpt
