// Layer split over pipeline pieces (see dtrain/parallel/pipeline_partition.hpp).
#include <cctype>
#include <cstddef>

#include "dtrain/core/error.hpp"
#include "dtrain/parallel/pipeline_partition.hpp"

namespace dtrain::parallel {

std::vector<LayerRange> partition_layers(int layers, int pieces,
                                         const std::vector<int>& explicit_counts) {
  DTRAIN_CHECK(pieces >= 1, Errc::invalid_config,
               "the pipeline needs at least one stage, got " << pieces);
  std::vector<int> counts = explicit_counts;
  if (counts.empty()) {
    DTRAIN_CHECK(layers >= pieces, Errc::invalid_config,
                 "--layers " << layers << " is fewer than the " << pieces
                             << " pipeline stages (--pp x --virtual-stages): every stage "
                                "needs at least one layer");
    for (int p = 0; p < pieces; ++p) counts.push_back(layers / pieces + (p < layers % pieces));
  } else {
    DTRAIN_CHECK(static_cast<int>(counts.size()) == pieces, Errc::invalid_config,
                 "--pipeline-layers lists " << counts.size() << " stages, the pipeline has "
                                            << pieces << " (--pp x --virtual-stages)");
    long long sum = 0;  // up to 65536 counts under 10^6 each: no overflow
    for (std::size_t i = 0; i < counts.size(); ++i) {
      DTRAIN_CHECK(counts[i] >= 1, Errc::invalid_config,
                   "--pipeline-layers: entry " << i + 1 << " is " << counts[i]
                                               << "; every chunk (one per stage and virtual "
                                                  "stage) needs at least one layer");
      sum += counts[i];
    }
    DTRAIN_CHECK(sum == layers, Errc::invalid_config,
                 "--pipeline-layers adds up to " << sum << " layers, the model has --layers "
                                                 << layers);
  }
  std::vector<LayerRange> ranges;
  int first = 0;
  for (int c : counts) {
    ranges.push_back({first, c});
    first += c;
  }
  return ranges;
}

std::vector<int> parse_pipeline_layers(const std::string& spec) {
  std::vector<int> counts;
  if (spec.empty()) return counts;
  std::size_t i = 0;
  while (true) {
    const std::size_t start = i;
    long value = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])) &&
           value < 1000000)
      value = value * 10 + (spec[i++] - '0');
    DTRAIN_CHECK(i > start && value < 1000000, Errc::invalid_config,
                 "--pipeline-layers must be a comma-separated list of layer counts, got '"
                     << spec << "'");
    counts.push_back(static_cast<int>(value));
    if (i == spec.size()) return counts;
    DTRAIN_CHECK(spec[i] == ',', Errc::invalid_config,
                 "--pipeline-layers must be a comma-separated list of layer counts, got '"
                     << spec << "'");
    ++i;
  }
}

}  // namespace dtrain::parallel
