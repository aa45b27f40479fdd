// inspect: the attributes of the file, /model and /optimizer, then one line per dataset.
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>

#include "commands.hpp"
#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/ckpt/file.hpp"

namespace dtrain_ckpt {
namespace {

// Multi-line values (run_config) go below their name, indented.
void print_attributes(const dtrain::ckpt::CheckpointFile& f, const std::string& object) {
  std::printf("%s\n", object.c_str());
  for (const auto& [name, value] : f.attributes(object)) {
    if (value.find('\n') == std::string::npos) {
      std::printf("  %s = %s\n", name.c_str(), value.c_str());
      continue;
    }
    std::printf("  %s:\n", name.c_str());
    std::istringstream lines(value);
    for (std::string line; std::getline(lines, line);) std::printf("    %s\n", line.c_str());
  }
}

}  // namespace

int inspect(const std::string& file) {
  const dtrain::ckpt::CheckpointFile f(file);
  std::printf("file %s\n", file.c_str());
  print_attributes(f, "/");
  for (const char* group : {"/model", "/optimizer"}) {
    bool present = false;
    for (const auto& d : f.datasets()) present = present || d.path.rfind(std::string(group) + "/", 0) == 0;
    if (present) print_attributes(f, group);
  }
  std::uint64_t total = 0;
  for (const auto& d : f.datasets()) {
    std::uint64_t n = 1;
    for (std::uint64_t x : d.shape) n *= x;
    total += n;
  }
  std::printf("datasets (%zu, %llu elements)\n", f.datasets().size(),
              static_cast<unsigned long long>(total));
  for (const auto& d : f.datasets()) {
    std::printf("  %-44s %-8s %-14s", d.path.c_str(), d.dtype.c_str(), dtrain::ckpt::shape_text(d.shape).c_str());
    if (d.has_checksum) {
      std::printf(" checksum %llu", static_cast<unsigned long long>(d.checksum));
    } else {
      std::printf(" checksum unusable (%s)", d.checksum_problem.c_str());
    }
    if (d.file_offset != dtrain::ckpt::DatasetInfo::kNoOffset)
      std::printf(" offset %llu", static_cast<unsigned long long>(d.file_offset));
    std::printf("\n");
  }
  return 0;
}

}  // namespace dtrain_ckpt
