#include "ckpt/same_file.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/hash.hpp"

namespace dtrain::ckpt {
namespace {
constexpr std::uint64_t kEndBytes = 64 * 1024;
}  // namespace

FileFingerprint file_fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  DTRAIN_CHECK(in, Errc::io, "cannot read checkpoint '" << path << "'");
  FileFingerprint f;
  f.bytes = static_cast<std::uint64_t>(in.tellg());
  std::vector<char> buf(static_cast<std::size_t>(std::min(f.bytes, kEndBytes)));
  std::uint64_t h = kFnvOffset;
  for (const std::uint64_t at : {std::uint64_t{0}, f.bytes - buf.size()}) {
    in.seekg(static_cast<std::streamoff>(at));
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    DTRAIN_CHECK(in, Errc::io, "cannot read checkpoint '" << path << "'");
    h = fnv1a(buf.data(), buf.size(), h);
  }
  f.hash = h;
  return f;
}

void require_same_file(Communicator& world, const std::string& path, const FileFingerprint& mine) {
  const std::array<std::uint64_t, 2> own = {mine.bytes, mine.hash};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(world.size()));
  world.all_gather(own.data(), all.data(), own.size(), DType::i64);
  for (int r = 1; r < world.size(); ++r) {
    const std::size_t at = 2 * static_cast<std::size_t>(r);
    if (all[at] == all[0] && all[at + 1] == all[1]) continue;
    DTRAIN_FAIL(Errc::corrupt_data,
                "checkpoint '" << path << "': world rank " << r << " sees another file than world rank 0 ("
                               << (all[at] == all[0] ? "the same size, other bytes in its first or last 64 KiB"
                                                     : std::to_string(all[at]) + " bytes against " + std::to_string(all[0]))
                               << "): every rank must read the same checkpoint (a node's own damaged, "
                                  "truncated or older copy?)");
  }
}

}  // namespace dtrain::ckpt
