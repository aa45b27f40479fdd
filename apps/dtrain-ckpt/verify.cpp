// verify: the format attributes, then every dataset's checksum recomputed from its data.
#include <algorithm>
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/ckpt/checksum.hpp"
#include "dtrain/ckpt/file.hpp"

namespace dtrain_ckpt {
namespace {

std::string attribute(const dtrain::ckpt::AttributeList& attrs, const std::string& name) {
  for (const auto& [n, v] : attrs)
    if (n == name) return v;
  return "";
}

int bad(const std::string& file, const std::string& why) {
  std::fprintf(stderr, "FAILED %s: %s\n", file.c_str(), why.c_str());
  return 1;
}

}  // namespace

int verify(const std::string& file) {
  namespace ck = dtrain::ckpt;
  const ck::CheckpointFile f(file);
  const ck::AttributeList root = f.attributes("/");
  if (attribute(root, "format") != ck::kFormatName) return bad(file, "not a dtrain checkpoint");
  const std::string version = attribute(root, "format_version");
  const bool integer = !version.empty() && version.size() <= 9 &&
                       std::all_of(version.begin(), version.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!integer || std::stol(version) < 1 || std::stol(version) > ck::kFormatVersion)
    return bad(file, "format version '" + version + "' is not one this tool reads");
  if (attribute(root, "checksum_algorithm") != ck::kChecksumAlgorithm)
    return bad(file, "unknown checksum algorithm '" + attribute(root, "checksum_algorithm") + "'");
  if (f.datasets().empty()) return bad(file, "no datasets");
  for (const ck::DatasetInfo& d : f.datasets()) {
    if (!d.has_checksum) return bad(file, "dataset " + d.path + " has no checksum attribute");
    if (d.dtype != "float32") return bad(file, "dataset " + d.path + " is " + d.dtype + ", not float32");
    const std::vector<float> data = f.read(d.path);
    const std::uint64_t sum = ck::checksum_run(data.data(), data.size(), 0);
    if (sum != d.checksum) {
      return bad(file, "dataset " + d.path + " fails its checksum (stored " + std::to_string(d.checksum) +
                           ", computed " + std::to_string(sum) + ")");
    }
  }
  std::printf("ok: %s: %zu datasets match their checksums\n", file.c_str(), f.datasets().size());
  return 0;
}

}  // namespace dtrain_ckpt
