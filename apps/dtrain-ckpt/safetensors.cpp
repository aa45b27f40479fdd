// export: the /model tensors of a checkpoint as one safetensors file, which PyTorch
// (safetensors.torch.load_file) and plain numpy read without dtrain:
//   8 bytes  little-endian u64: length N of the header
//   N bytes  JSON {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [...],
//            "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8
//   then     the tensors' bytes, little-endian, row-major, back to back in header order
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
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

  // Written under a temporary name and renamed when complete, so OUT naming the checkpoint
  // itself (or a link to it) is refused, and a failed export leaves no half-written file.
  std::error_code same_ec;
  DTRAIN_CHECK(!std::filesystem::equivalent(file, out, same_ec), Errc::invalid_argument,
               "'" << out << "' is the checkpoint itself: export to another file");
  const std::string tmp = out + ".tmp";
  std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
  DTRAIN_CHECK(os, Errc::io, "cannot create '" << tmp << "'");
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
  os.write(reinterpret_cast<const char*>(len), 8);
  os.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const ck::DatasetInfo* d : tensors) {
    std::vector<float> data = f.read(d->path);
    to_little_endian(data);
    os.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  }
  os.close();
  std::error_code ec;
  if (!os.good()) std::filesystem::remove(tmp, ec);
  DTRAIN_CHECK(os.good(), Errc::io, "cannot write '" << tmp << "'");
  std::filesystem::rename(tmp, out, ec);
  DTRAIN_CHECK(!ec, Errc::io, "cannot rename '" << tmp << "' to '" << out << "': " << ec.message());
  std::printf("exported %zu tensors (%llu bytes of data) to %s\n", tensors.size(),
              static_cast<unsigned long long>(offset), out.c_str());
  return 0;
}

}  // namespace dtrain_ckpt
