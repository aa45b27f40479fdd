#include "ckpt/tensor_directory.hpp"

#include <sstream>
#include <unordered_map>

#include "dtrain/core/error.hpp"

namespace dtrain::ckpt {

std::string describe_stage(const ParameterStore& params) {
  std::ostringstream os;
  for (const ParamInfo& p : params) {
    os << p.name;
    for (std::int64_t d : p.shape) os << ' ' << d;
    os << '\n';
  }
  return os.str();
}

std::vector<TensorEntry> merge_stages(const std::vector<std::string>& stages) {
  std::vector<TensorEntry> out;
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t stage = 0; stage < stages.size(); ++stage) {
    std::istringstream lines(stages[stage]);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      TensorEntry e;
      e.first_stage = static_cast<int>(stage);
      fields >> e.name;
      for (std::int64_t d; fields >> d;) e.shape.push_back(d);
      DTRAIN_CHECK(!e.name.empty() && !e.shape.empty(), Errc::internal,
                   "pipeline stage " << stage << " described a tensor as '" << line << "'");
      const auto [it, added] = index.emplace(e.name, out.size());
      if (added) {
        out.push_back(std::move(e));
        continue;
      }
      DTRAIN_CHECK(out[it->second].shape == e.shape, Errc::internal,
                   "tensor " << e.name << " has different shapes on pipeline stages "
                             << out[it->second].first_stage << " and " << stage);
    }
  }
  return out;
}

std::vector<TensorEntry> gather_directory(Communicator& pp, const ParameterStore& params) {
  const std::string mine = describe_stage(params);
  if (pp.size() == 1) return merge_stages({mine});
  std::int64_t length = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(pp.size()));
  pp.all_gather(&length, lengths.data(), 1, DType::i64);
  std::vector<std::size_t> counts(lengths.begin(), lengths.end());
  std::size_t total = 0;
  for (std::size_t c : counts) total += c;
  std::string all(total, '\0');
  pp.all_gather_v(mine.data(), all.data(), counts.data(), DType::u8);
  std::vector<std::string> stages;
  std::size_t at = 0;
  for (std::size_t c : counts) {
    stages.push_back(all.substr(at, c));
    at += c;
  }
  return merge_stages(stages);
}

}  // namespace dtrain::ckpt
