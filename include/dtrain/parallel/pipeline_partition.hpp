#pragma once
// Which transformer layers each pipeline piece holds. Pure functions: every rank computes
// the same split, and a bad one throws the same error on every rank before any
// communication.
#include <string>
#include <vector>

#include "dtrain/export.hpp"

namespace dtrain::parallel {

struct DTRAIN_API LayerRange {
  int first = 0;  // global index of the piece's first layer
  int count = 0;

  bool operator==(const LayerRange& o) const noexcept {
    return first == o.first && count == o.count;
  }
};

// The layers of each of `pieces` consecutive pieces (pieces = --pp x --virtual-stages; piece
// p = chunk * pp + stage). Balanced by layer count: the first layers % pieces pieces hold one
// more, since the last one also runs the LM head and the loss. explicit_counts (from
// --pipeline-layers), when not empty, is used as given. Throws Error(Errc::invalid_config)
// when a piece would have no layer or the explicit split does not add up.
DTRAIN_API std::vector<LayerRange> partition_layers(int layers, int pieces,
                                                    const std::vector<int>& explicit_counts = {});

// "3,2,2,1" -> {3, 2, 2, 1}; "" -> {}. Throws Error(Errc::invalid_config) on anything else.
DTRAIN_API std::vector<int> parse_pipeline_layers(const std::string& spec);

}  // namespace dtrain::parallel
