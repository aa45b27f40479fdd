// verify: the format attributes, then every dataset's checksum recomputed from its data.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.hpp"
#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/ckpt/checksum.hpp"
#include "dtrain/ckpt/file.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain_ckpt {
namespace {

std::string attribute(const dtrain::ckpt::AttributeList& attrs, const std::string& name) {
  for (const auto& [n, v] : attrs)
    if (n == name) return v;
  return "";
}

// A header error's message without its leading "checkpoint '<file>'": the callers name it.
std::string reason(const dtrain::Error& e, const std::string& file) {
  std::string why = e.what();
  const std::string where = "checkpoint '" + file + "'";
  if (why.rfind(where, 0) == 0) {
    why.erase(0, where.size());
    why.erase(0, why.rfind(": ", 0) == 0 ? 2 : why.rfind(' ', 0) == 0 ? 1 : 0);
  }
  return why;
}

int bad(const std::string& file, const std::string& why) {
  std::fprintf(stderr, "FAILED %s: %s\n", file.c_str(), why.c_str());
  return 1;
}

}  // namespace

std::string format_problem(const dtrain::ckpt::CheckpointFile& f) {
  namespace ck = dtrain::ckpt;
  const ck::AttributeList root = f.attributes("/");
  if (attribute(root, "format") != ck::kFormatName) return "not a dtrain checkpoint";
  for (const char* name : {"format_version", "checksum_algorithm"}) {
    if (std::none_of(root.begin(), root.end(), [&](const auto& a) { return a.first == name; }))
      return std::string("no ") + name + " attribute";
  }
  const std::string version = attribute(root, "format_version");
  const bool integer = !version.empty() && version.size() <= 9 &&
                       std::all_of(version.begin(), version.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!integer || std::stol(version) < 1 || std::stol(version) > ck::kFormatVersion)
    return "format version '" + version + "' is not one this tool reads";
  if (attribute(root, "checksum_algorithm") != ck::kChecksumAlgorithm)
    return "unknown checksum algorithm '" + attribute(root, "checksum_algorithm") + "'";
  try {  // the same three as a resume reads them: their HDF5 types too ("1" is not 1)
    f.check_format();
  } catch (const dtrain::Error& e) {
    if (e.code() != dtrain::Errc::corrupt_data) throw;
    return reason(e, f.path());
  }
  return "";
}

namespace {

// Digits of a value up to 2^64 - 1 (the counters' types, int64 and uint64, are checked by
// the header's reading).
bool is_count(const std::string& text) {
  if (text.empty() || text.size() > 20 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  errno = 0;
  std::strtoull(text.c_str(), nullptr, 10);
  return errno == 0;
}

// What a resume reads besides the tensors' data: the step counters and, for each /model
// tensor, its two optimizer moments of the same shape; "" when all are there.
std::string structure_problem(const dtrain::ckpt::CheckpointFile& f) {
  namespace ck = dtrain::ckpt;
  const ck::AttributeList root = f.attributes("/");
  for (const char* name : {"step", "consumed_samples", "data_position"})
    if (!is_count(attribute(root, name))) return std::string("attribute '") + name + "' is missing or not a count";
  const auto& all = f.datasets();
  if (std::none_of(all.begin(), all.end(), [](const ck::DatasetInfo& d) { return d.path.rfind("/optimizer/", 0) == 0; }))
    return "no /optimizer datasets";
  if (!is_count(attribute(f.attributes("/optimizer"), "step")))
    return "attribute /optimizer 'step' is missing or not a count";
  bool any = false;
  for (const ck::DatasetInfo& d : f.datasets()) {
    if (d.path.rfind("/model/", 0) != 0) continue;
    any = true;
    const std::string name = d.path.substr(std::strlen("/model/"));
    for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
      const ck::DatasetInfo* m = f.find("/optimizer/" + name + "/" + moment);
      if (!m) return "tensor '" + name + "' has no /optimizer/" + name + "/" + moment;
      if (m->shape != d.shape) return "/optimizer/" + name + "/" + moment + " is not the shape of " + d.path;
    }
  }
  const std::string optimizer = "/optimizer/";
  for (const ck::DatasetInfo& d : f.datasets()) {  // and each moment's tensor
    if (d.path.rfind(optimizer, 0) != 0) continue;
    const std::size_t slash = d.path.rfind('/');
    const std::string moment = d.path.substr(slash + 1);
    if (slash <= optimizer.size() || (moment != "exp_avg" && moment != "exp_avg_sq")) continue;
    const std::string name = d.path.substr(optimizer.size(), slash - optimizer.size());
    if (!f.find("/model/" + name)) return d.path + " belongs to no /model/" + name;
  }
  return any ? "" : "no /model tensors";
}

}  // namespace

// A GPT's file (its /model attributes are positive; other models' are 0) must hold every
// tensor of the model they describe, and a separate head exactly when it is not tied: the
// first problem, "" when none. (A resume reads the tensors its own model has; an export
// writes what the file holds.)
std::string gpt_tensor_problem(const dtrain::ckpt::CheckpointFile& f) {
  const dtrain::ckpt::AttributeList model = f.attributes("/model");
  const std::string layers = attribute(model, "layers");
  for (const char* key : {"layers", "heads", "d_model", "seq_len", "vocab"}) {
    const std::string v = attribute(model, key);
    if (!is_count(v) || std::stoll(v) == 0) return "";
  }
  const auto missing = [&](const std::string& name) {
    return f.find("/model/" + name) ? "" : "no dataset /model/" + name + " (/model describes a GPT of " + layers +
                                               " layers, which has one)";
  };
  const std::string tie = attribute(model, "tie_embeddings");  // 0 or 1: the header's reading checked it
  if (tie == "1" && f.find("/model/lm_head.weight"))
    return "/model/lm_head.weight in a file whose /model says the head is tied to wte (tie_embeddings 1)";
  // Name by name, to the first missing: a damaged `layers` (10^15) lists nothing in memory.
  std::vector<std::string> names = {"wte", "wpe", "ln_f.weight", "ln_f.bias"};
  if (tie == "0") names.emplace_back("lm_head.weight");
  for (const std::string& name : names)
    if (const std::string problem = missing(name); !problem.empty()) return problem;
  const long long blocks = std::stoll(layers);
  for (long long i = 0; i < blocks; ++i) {
    for (const char* part : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                             "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                             "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
      if (const std::string problem = missing("h." + std::to_string(i) + "." + part); !problem.empty()) return problem;
  }
  return "";
}

int verify(const std::string& file) {
  namespace ck = dtrain::ckpt;
  const ck::CheckpointFile f(file);
  std::string problem = format_problem(f);
  if (problem.empty()) problem = structure_problem(f);
  if (!problem.empty()) return bad(file, problem);
  // Each attribute as a resume reads it, its HDF5 type and range too. (The checks above come
  // first for their plainer messages, which scripts match: "format version ..." and the like.)
  try {
    f.header();
  } catch (const dtrain::Error& e) {
    return bad(file, reason(e, file));
  }
  problem = gpt_tensor_problem(f);  // after the header: its attributes are integers
  if (!problem.empty()) return bad(file, problem);
  for (const ck::DatasetInfo& d : f.datasets()) {
    if (!d.has_checksum) return bad(file, d.checksum_problem);
    if (d.dtype != "float32") return bad(file, "dataset " + d.path + " is " + d.dtype + ", not float32");
    std::vector<float> data;
    try {
      data = f.read(d.path);
    } catch (const dtrain::Error& e) {  // a dataset the file does not hold as a checkpoint does
      if (e.code() != dtrain::Errc::corrupt_data) throw;
      std::string why = e.what();
      const std::string where = "'" + file + "': ";  // bad() names the file itself
      if (why.rfind(where, 0) == 0) why.erase(0, where.size());
      return bad(file, why);
    }
    const std::uint64_t sum = ck::checksum_run(data.data(), data.size(), 0);
    if (sum != d.checksum) {
      return bad(file, "dataset " + d.path + " fails its checksum (stored " + std::to_string(d.checksum) +
                           ", computed " + std::to_string(sum) + ")");
    }
    // No NaN, as a resume refuses one (an infinity may be a byom's own value, a mask).
    const auto nan = std::find_if(data.begin(), data.end(), [](float v) { return std::isnan(v); });
    if (nan != data.end()) {
      return bad(file, "dataset " + d.path + " holds nan at element " + std::to_string(nan - data.begin()) +
                           ", which a resume refuses");
    }
    // AdamW's second moments are means of squares: a negative one, which a resume refuses,
    // made the next update NaN.
    const std::string sq = "/exp_avg_sq";
    if (d.path.size() > sq.size() && d.path.compare(d.path.size() - sq.size(), sq.size(), sq) == 0) {
      const auto negative = std::find_if(data.begin(), data.end(), [](float v) { return v < 0; });
      if (negative != data.end()) {
        return bad(file, "dataset " + d.path + " holds a negative second moment (" + std::to_string(*negative) +
                             ") at element " + std::to_string(negative - data.begin()) + ", which a resume refuses");
      }
    }
  }
  std::printf("ok: %s: %zu datasets match their checksums\n", file.c_str(), f.datasets().size());
  return 0;
}

}  // namespace dtrain_ckpt
