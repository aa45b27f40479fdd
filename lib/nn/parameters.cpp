// Flat parameter/gradient arenas and the registry of named parameters.
#include "dtrain/nn/parameters.hpp"

#include <utility>

#include "dtrain/core/buffer.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/rng.hpp"

namespace dtrain {
namespace {
std::size_t product(const std::vector<std::int64_t>& s) {
  std::size_t n = 1;
  for (auto d : s) n *= static_cast<std::size_t>(d);
  return n;
}
}  // namespace

std::size_t ParamInfo::logical_numel() const { return product(shape); }
std::size_t ParamInfo::local_numel() const { return product(local_shape); }

ParameterStore::ParameterStore(Device& dev) : dev_(&dev) {}
ParameterStore::ParameterStore(ParameterStore&&) noexcept = default;
ParameterStore& ParameterStore::operator=(ParameterStore&&) noexcept = default;
ParameterStore::~ParameterStore() = default;

std::size_t ParameterStore::add(const std::string& name, std::vector<std::int64_t> shape,
                                bool decay, std::int64_t padded_rows) {
  DTRAIN_CHECK(!allocated(), Errc::internal, "parameter '" << name << "' added after allocate()");
  DTRAIN_CHECK(!name.empty(), Errc::invalid_argument, "parameter name must not be empty");
  DTRAIN_CHECK(index_.count(name) == 0, Errc::invalid_argument,
               "parameter '" << name << "' registered twice");
  DTRAIN_CHECK(!shape.empty(), Errc::invalid_argument, "parameter '" << name << "' has no shape");
  for (auto d : shape)
    DTRAIN_CHECK(d > 0, Errc::invalid_argument,
                 "parameter '" << name << "' has a non-positive dimension " << d);
  ParamInfo p;
  p.name = name;
  p.shape = shape;
  p.local_shape = shape;
  p.slice_offset.assign(shape.size(), 0);
  p.storage_shape = shape;
  if (padded_rows > shape[0]) p.storage_shape[0] = padded_rows;
  p.decay = decay;
  p.numel = product(p.storage_shape);
  p.offset = total_;
  total_ += (p.numel + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  index_.emplace(name, infos_.size());
  infos_.push_back(std::move(p));
  return infos_.size() - 1;
}

void ParameterStore::allocate() {
  DTRAIN_CHECK(!allocated(), Errc::internal, "ParameterStore::allocate() called twice");
  const std::size_t bytes = (total_ ? total_ : 1) * sizeof(float);
  param_buf_ = DeviceBuffer(*dev_, bytes);  // zero-filled by the device
  grad_buf_ = DeviceBuffer(*dev_, bytes);
  params_ = param_buf_.as<float>();
  grads_ = grad_buf_.as<float>();
}

void ParameterStore::zero_grads() {
  if (grads_) dev_->zero(grads_, bytes());
}

const ParamInfo* ParameterStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &infos_[it->second];
}

const ParamInfo& ParameterStore::at(const std::string& name) const {
  const ParamInfo* p = find(name);
  DTRAIN_CHECK(p != nullptr, Errc::invalid_argument, "no parameter named '" << name << "'");
  return *p;
}

void ParameterStore::init_normal(const ParamInfo& p, std::uint64_t seed, float mean, float std) {
  DTRAIN_CHECK(allocated(), Errc::internal, "init before allocate()");
  // Values are generated on the host; a non-CPU device gets them with one copy.
  const bool host = dev_->kind() == DeviceKind::cpu;
  AlignedBuffer staging;
  float* out = param(p);
  if (!host) {
    staging.ensure(p.numel * sizeof(float));
    out = staging.as<float>();
  }
  const std::uint64_t stream = rng::stream_id(p.name);
  if (p.local_shape.size() == 1) {
    rng::fill_normal(out, p.local_shape[0], seed, stream, p.slice_offset[0], mean, std);
  } else {
    // Row-major: each local "row" (all dims but the last folded) is a contiguous run of the
    // logical tensor; its first logical index follows from the slice offsets.
    const std::size_t nd = p.shape.size();
    const std::int64_t cols = p.local_shape[nd - 1];
    const std::int64_t rows = static_cast<std::int64_t>(p.local_numel()) / cols;
    std::vector<std::int64_t> idx(nd, 0);  // local multi-index of the row start
    for (std::int64_t r = 0; r < rows; ++r) {
      std::uint64_t logical = 0;
      for (std::size_t d = 0; d < nd; ++d)
        logical = logical * p.shape[d] + static_cast<std::uint64_t>(idx[d] + p.slice_offset[d]);
      rng::fill_normal(out + r * cols, cols, seed, stream, logical, mean, std);
      for (std::size_t d = nd - 1; d-- > 0;) {  // next row: increment dims nd-2 .. 0
        if (++idx[d] < p.local_shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  if (!host) dev_->copy(param(p), out, p.numel * sizeof(float), CopyKind::host_to_device);
}

void ParameterStore::init_constant(const ParamInfo& p, float value) {
  DTRAIN_CHECK(allocated(), Errc::internal, "init before allocate()");
  dev_->fill(param(p), value, static_cast<std::int64_t>(p.local_numel()));
}

}  // namespace dtrain
