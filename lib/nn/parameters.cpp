// Flat parameter/gradient arenas and the registry of named parameters.
#include "dtrain/nn/parameters.hpp"

#include <algorithm>
#include <cstring>
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

std::size_t ParamInfo::logical_index(std::size_t i) const {
  // Peel the local multi-index off from the last dim; dim 0 also names the part (block).
  std::size_t logical = 0, stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto n = static_cast<std::size_t>(local_shape[d]);
    std::int64_t idx = static_cast<std::int64_t>(i % n);
    i /= n;
    if (d == 0 && slice_blocks > 1) {
      const std::int64_t per = local_shape[0] / slice_blocks;
      idx = (idx / per) * (shape[0] / slice_blocks) + slice_offset[0] + idx % per;
    } else {
      idx += slice_offset[d];
    }
    logical += static_cast<std::size_t>(idx) * stride;
    stride *= static_cast<std::size_t>(shape[d]);
  }
  return logical;
}

ParameterStore::ParameterStore(Device& dev) : dev_(&dev) {}
ParameterStore::ParameterStore(ParameterStore&&) noexcept = default;
ParameterStore& ParameterStore::operator=(ParameterStore&&) noexcept = default;
ParameterStore::~ParameterStore() = default;

std::size_t ParameterStore::add(const std::string& name, std::vector<std::int64_t> shape,
                                bool decay, std::int64_t padded_rows) {
  std::vector<std::int64_t> offset(shape.size(), 0);
  return add_slice(name, shape, shape, std::move(offset), decay, /*tp_sharded=*/false,
                   padded_rows);
}

namespace {

// A name is an HDF5 path below /model and /optimizer in checkpoints, and a word of the
// checkpoint's text directory: it must come back from both as it went in. `names` and
// `groups` are what is registered (ParameterStore::index_ and groups_).
void check_name_survives_checkpoints(const std::string& name,
                                     const std::unordered_map<std::string, std::size_t>& names,
                                     const std::unordered_map<std::string, std::string>& groups) {
  const auto refuse = [&](const char* why) {
    DTRAIN_FAIL(Errc::invalid_argument, "parameter name '" << name << "' " << why
                                            << " (it names a dataset in checkpoints)");
  };
  const auto refuse_both = [&](const std::string& other) {
    DTRAIN_FAIL(Errc::invalid_argument, "parameter names '" << other << "' and '" << name
                    << "' cannot both be saved: one would be a dataset and a group of the "
                       "checkpoint at once");
  };
  for (const unsigned char ch : name)
    if (ch <= ' ' || ch == 0x7f) refuse("holds a space or a control character");
  std::size_t start = 0;
  for (;;) {  // each '/'-separated part
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string part = name.substr(start, end - start);
    if (part.empty()) refuse("has an empty part (a leading, trailing or doubled '/')");
    if (part == "." || part == "..") refuse("has a '.' or '..' part");
    if (end == name.size()) break;
    if (names.count(name.substr(0, end))) refuse_both(name.substr(0, end));
    start = end + 1;
  }
  const auto holder = groups.find(name);
  if (holder != groups.end()) refuse_both(holder->second);
}

}  // namespace

void ParameterStore::check_new_name(const std::string& name) const {
  DTRAIN_CHECK(!name.empty(), Errc::invalid_argument, "parameter name must not be empty");
  DTRAIN_CHECK(index_.count(name) == 0, Errc::invalid_argument,
               "parameter '" << name << "' registered twice");
  check_name_survives_checkpoints(name, index_, groups_);
}

std::size_t ParameterStore::add_slice(const std::string& name, std::vector<std::int64_t> shape,
                                      std::vector<std::int64_t> local_shape,
                                      std::vector<std::int64_t> slice_offset, bool decay,
                                      bool tp_sharded, std::int64_t padded_rows,
                                      std::int64_t slice_blocks) {
  DTRAIN_CHECK(!allocated(), Errc::invalid_argument, "parameter '" << name << "' added after allocate()");
  check_new_name(name);
  DTRAIN_CHECK(!shape.empty(), Errc::invalid_argument, "parameter '" << name << "' has no shape");
  for (auto d : shape)
    DTRAIN_CHECK(d > 0, Errc::invalid_argument,
                 "parameter '" << name << "' has a non-positive dimension " << d);
  DTRAIN_CHECK(local_shape.size() == shape.size() && slice_offset.size() == shape.size(),
               Errc::invalid_argument, "parameter '" << name << "': slice rank mismatch");
  DTRAIN_CHECK(slice_blocks > 0 && shape[0] % slice_blocks == 0 &&
                   local_shape[0] % slice_blocks == 0,
               Errc::invalid_argument,
               "parameter '" << name << "': dim 0 does not split into " << slice_blocks
                             << " parts");
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::int64_t extent = d == 0 ? shape[0] / slice_blocks : shape[d];
    const std::int64_t local = d == 0 ? local_shape[0] / slice_blocks : local_shape[d];
    DTRAIN_CHECK(local > 0 && slice_offset[d] >= 0 && slice_offset[d] + local <= extent,
                 Errc::invalid_argument,
                 "parameter '" << name << "': slice outside the tensor in dim " << d);
  }
  ParamInfo p;
  p.name = name;
  p.shape = shape;
  p.local_shape = local_shape;
  p.slice_offset = slice_offset;
  p.storage_shape = local_shape;
  if (padded_rows > local_shape[0]) p.storage_shape[0] = padded_rows;
  p.decay = decay;
  p.slice_blocks = slice_blocks;
  p.tp_sharded = tp_sharded;
  // The arena's byte count must not wrap (a size_t product of int dimensions can).
  double numel = 1;
  for (auto d : p.storage_shape) numel *= static_cast<double>(d);
  DTRAIN_CHECK(numel + static_cast<double>(total_) <= 0x1p58, Errc::invalid_config,
               "parameter '" << name << "' (" << numel << " elements) takes the parameters past 2^58 elements, "
                             "beyond any machine's memory");
  p.numel = product(p.storage_shape);
  p.offset = total_;
  total_ += (p.numel + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  index_.emplace(name, infos_.size());
  for (std::size_t slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1))
    groups_.emplace(name.substr(0, slash), name);
  infos_.push_back(std::move(p));
  return infos_.size() - 1;
}

void ParameterStore::start_unit() {
  DTRAIN_CHECK(!allocated(), Errc::invalid_argument, "ParameterStore::start_unit() after allocate()");
  total_ = (total_ + kUnitAlignFloats - 1) / kUnitAlignFloats * kUnitAlignFloats;
  units_ = true;
}

void ParameterStore::allocate(bool hold_params, bool hold_grads) {
  DTRAIN_CHECK(!allocated(), Errc::invalid_argument, "ParameterStore::allocate() called twice");
  if (units_) start_unit();  // the last unit ends on a page boundary too
  const std::size_t bytes = (total_ ? total_ : 1) * sizeof(float);
  // Arenas, so ZeRO 2/3 can hand back the pieces a rank does not own.
  param_buf_ = DeviceBuffer::arena(*dev_, bytes);
  grad_buf_ = DeviceBuffer::arena(*dev_, bytes);
  params_ = param_buf_.as<float>();
  grads_ = grad_buf_.as<float>();
  if (hold_params) dev_->restore(params_, bytes);
  if (hold_grads) dev_->restore(grads_, bytes);
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

namespace {

// The spans [first, last) of p's local elements to initialise: all of them, or those inside
// the arena ranges `only`.
std::vector<std::pair<std::size_t, std::size_t>> init_spans(const ParamInfo& p,
                                                            const ParameterStore::ArenaRanges* only) {
  const std::size_t n = p.local_numel();
  if (!only) return {{0, n}};
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  for (const auto& r : *only) {
    const std::size_t lo = std::max(r.first, p.offset), hi = std::min(r.second, p.offset + n);
    if (lo < hi) spans.push_back({lo - p.offset, hi - p.offset});
  }
  return spans;
}

}  // namespace

void ParameterStore::init_normal(const ParamInfo& p, std::uint64_t seed, float mean, float std,
                                 const ArenaRanges* only) {
  DTRAIN_CHECK(allocated(), Errc::invalid_argument, "init before allocate()");
  // Values are generated on the host; a non-CPU device gets them through a host buffer of
  // one span, with one copy per span (set-up calls this once per unit for every tensor, so
  // nothing is staged for the tensors a unit does not touch).
  const bool host = dev_->kind() == DeviceKind::cpu;
  AlignedBuffer staging;
  const std::uint64_t stream = rng::stream_id(p.name);
  // Runs of consecutive logical elements: a row of the last dim (a part of dim 0 for 1-D
  // tensors); a span's piece of a run is filled from the logical index of its first element.
  const auto run = static_cast<std::size_t>(
      p.local_shape.size() == 1 ? p.local_shape[0] / p.slice_blocks : p.local_shape.back());
  for (const auto& [first, last] : init_spans(p, only)) {
    float* out = param(p) + first;  // element `first` of the span
    if (!host) {
      staging.ensure((last - first) * sizeof(float));
      out = staging.as<float>();
    }
    for (std::size_t i = first; i < last;) {
      const std::size_t end = std::min(last, (i / run + 1) * run);
      rng::fill_normal(out + (i - first), end - i, seed, stream, p.logical_index(i), mean, std);
      i = end;
    }
    if (!host) {
      dev_->copy(param(p) + first, out, (last - first) * sizeof(float), CopyKind::host_to_device);
    }
  }
}

void ParameterStore::set_values(const ParamInfo& p, const float* logical, const ArenaRanges* only) {
  DTRAIN_CHECK(allocated(), Errc::invalid_argument, "set_values before allocate()");
  const bool host = dev_->kind() == DeviceKind::cpu;
  AlignedBuffer staging;
  const auto run = static_cast<std::size_t>(  // consecutive logical elements, as in init_normal
      p.local_shape.size() == 1 ? p.local_shape[0] / p.slice_blocks : p.local_shape.back());
  for (const auto& [first, last] : init_spans(p, only)) {
    float* out = param(p) + first;
    if (!host) {
      staging.ensure((last - first) * sizeof(float));
      out = staging.as<float>();
    }
    for (std::size_t i = first; i < last;) {
      const std::size_t end = std::min(last, (i / run + 1) * run);
      std::memcpy(out + (i - first), logical + p.logical_index(i), (end - i) * sizeof(float));
      i = end;
    }
    if (!host) dev_->copy(param(p) + first, out, (last - first) * sizeof(float), CopyKind::host_to_device);
  }
}

void ParameterStore::init_constant(const ParamInfo& p, float value, const ArenaRanges* only) {
  DTRAIN_CHECK(allocated(), Errc::invalid_argument, "init before allocate()");
  for (const auto& [first, last] : init_spans(p, only))
    dev_->fill(param(p) + first, value, static_cast<std::int64_t>(last - first));
}

}  // namespace dtrain
