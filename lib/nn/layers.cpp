// Parameter registration and binding of the basic layers.
#include "dtrain/nn/layers.hpp"

namespace dtrain::nn {

void Linear::declare(ParameterStore& ps, const std::string& name, int in_features,
                     int out_features, bool bias) {
  prefix = name;
  in = in_features;
  out = out_features;
  has_bias = bias;
  ps.add(prefix + ".weight", {out, in}, /*decay=*/true);
  if (has_bias) ps.add(prefix + ".bias", {out}, /*decay=*/false);
}

void Linear::bind(ParameterStore& ps) {
  const ParamInfo& pw = ps.at(prefix + ".weight");
  w = ps.param(pw);
  dw = ps.grad(pw);
  if (has_bias) {
    const ParamInfo& pb = ps.at(prefix + ".bias");
    b = ps.param(pb);
    db = ps.grad(pb);
  }
}

void LayerNorm::declare(ParameterStore& ps, const std::string& name, int channels) {
  prefix = name;
  C = channels;
  ps.add(prefix + ".weight", {C}, /*decay=*/false);
  ps.add(prefix + ".bias", {C}, /*decay=*/false);
}

void LayerNorm::bind(ParameterStore& ps) {
  const ParamInfo& pw = ps.at(prefix + ".weight");
  const ParamInfo& pb = ps.at(prefix + ".bias");
  w = ps.param(pw);
  dw = ps.grad(pw);
  b = ps.param(pb);
  db = ps.grad(pb);
}

}  // namespace dtrain::nn
