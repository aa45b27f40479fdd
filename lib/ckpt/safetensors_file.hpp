#pragma once
// Read access to a safetensors file (Hugging Face's format; dtrain-ckpt export writes it):
//   8 bytes  little-endian u64: length N of the JSON header
//   N bytes  {"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [b, e]}, ...}
//   then     the tensors' bytes, little-endian, row-major; offsets count from here.
// The header is checked whole when the file is opened: every tensor's bytes lie inside the
// file and match its dtype and shape.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::ckpt {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;                  // "F32", "BF16", ...
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;   // byte range after the header
};

class SafetensorsFile {
 public:
  // Errc::io when the file cannot be opened or read, Errc::corrupt_data when it is not a
  // well-formed safetensors file (each message names the path).
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;  // null when absent
  // The "__metadata__" strings; empty when the file has none.
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  // A floating-point tensor (F64, F32, F16 or BF16) as fp32 values, row-major; a value outside
  // fp32's range becomes infinite. Errc::invalid_argument for another dtype.
  std::vector<float> read(const SafetensorsTensor& t) const;

 private:
  void read_bytes(void* dst, std::uint64_t bytes, std::uint64_t offset) const;

  struct Descriptor {  // closed when the object goes, or when its constructor throws
    int fd = -1;
    Descriptor() = default;
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    ~Descriptor();
  };
  std::string path_;
  Descriptor fd_;
  std::uint64_t data_start_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace dtrain::ckpt
