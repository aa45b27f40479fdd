#pragma once
// ParameterStore: every parameter of a model in ONE flat fp32 arena, and every gradient in a
// second arena with the same layout. Each parameter has a global name and a logical shape, so
// later layers can bucket gradients, shard optimiser state (ZeRO) and write checkpoints by
// offsets and names alone.
//
// Layout rules:
//  * parameters are laid out in registration order; each starts on a 64-byte boundary (16
//    floats), so an arena contains small zero gaps and numel() >= sum of the spans;
//  * a parameter may own only a slice of its logical tensor (tensor parallelism):
//    local_shape/slice_offset describe it (the whole tensor without tensor parallelism).
//    A fused tensor whose dim 0 concatenates slice_blocks equal parts (q|k|v of c_attn) is
//    sliced the same way in each part: the local rows are the local_shape[0]/slice_blocks
//    rows at slice_offset[0] of part 0, then the same rows of part 1, ...;
//  * storage may pad dim 0 (e.g. wte rows up to the padded vocabulary): storage_shape is what
//    the span holds, and the local slice is its leading prod(local_shape) elements. Padding
//    and gaps are zero in both arenas and stay zero (their gradients are always zero).
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"

namespace dtrain {

struct DTRAIN_API ParamInfo {
  std::string name;                    // global name, e.g. "h.0.attn.c_attn.weight"
  std::vector<std::int64_t> shape;     // logical (global) shape
  std::vector<std::int64_t> local_shape;   // slice of the logical tensor held here
  std::vector<std::int64_t> slice_offset;  // start of that slice in the logical tensor
  std::vector<std::int64_t> storage_shape; // layout in the arena (local_shape, dim 0 padded)
  std::size_t offset = 0;              // first element in the arena
  std::size_t numel = 0;               // elements spanned in the arena = prod(storage_shape)
  bool decay = true;                   // weight decay applies (matrices, embeddings)
  std::int64_t slice_blocks = 1;       // equal parts of dim 0 sliced alike (see above)
  // Split over the tensor-parallel group (each TP rank holds a different slice). False:
  // replicated, every TP rank holds the whole tensor and ends backward with the same
  // gradient, so a TP-global norm must count it once (nn::grad_sum_squares).
  bool tp_sharded = false;

  std::size_t logical_numel() const;   // prod(shape)
  std::size_t local_numel() const;     // prod(local_shape): the leading elements of the span
  // Row-major index in the logical tensor of element i (< local_numel()) of the local slice.
  std::size_t logical_index(std::size_t i) const;
};

class DTRAIN_API ParameterStore {
 public:
  static constexpr std::size_t kAlignFloats = 16;  // 64 bytes

  explicit ParameterStore(Device& dev);
  ParameterStore(ParameterStore&&) noexcept;
  ParameterStore& operator=(ParameterStore&&) noexcept;
  ~ParameterStore();

  // Registration (before allocate()). padded_rows > shape[0] pads dim 0 of the storage.
  // Returns the index of the new parameter. Names must be unique.
  std::size_t add(const std::string& name, std::vector<std::int64_t> shape, bool decay,
                  std::int64_t padded_rows = 0);
  // add()'s checks of a new name alone (Errc::invalid_argument: empty, registered already,
  // or one that would not come back from a checkpoint as it went in), for callers with
  // checks of their own to make between the name's and the registration.
  void check_new_name(const std::string& name) const;
  // A parameter of which this process holds the slice local_shape at slice_offset (in each
  // of slice_blocks parts of dim 0); tp_sharded marks it as split over the TP group.
  std::size_t add_slice(const std::string& name, std::vector<std::int64_t> shape,
                        std::vector<std::int64_t> local_shape,
                        std::vector<std::int64_t> slice_offset, bool decay, bool tp_sharded,
                        std::int64_t padded_rows = 0, std::int64_t slice_blocks = 1);
  // Starts a unit: the next parameter begins on a page boundary (kUnitAlignFloats), and so
  // does the end of the arena. ZeRO 2/3 split units at page boundaries so that the pieces a
  // rank does not own can be handed back to the system (Device::discard).
  static constexpr std::size_t kUnitAlignFloats = 1024;  // 4 KiB
  void start_unit();
  // Allocates both arenas once (Device::allocate_arena); no registration afterwards. An
  // arena held is restored whole (zero-filled); otherwise nothing of it is held yet and the
  // caller restores the pieces it uses (ZeRO 2: its gradient pieces; ZeRO 3: also its
  // parameter pieces).
  void allocate(bool hold_params = true, bool hold_grads = true);
  bool allocated() const noexcept { return params_ != nullptr; }

  float* params() noexcept { return params_; }
  const float* params() const noexcept { return params_; }
  float* grads() noexcept { return grads_; }
  const float* grads() const noexcept { return grads_; }
  float* param(const ParamInfo& p) noexcept { return params_ + p.offset; }
  float* grad(const ParamInfo& p) noexcept { return grads_ + p.offset; }
  const float* param(const ParamInfo& p) const noexcept { return params_ + p.offset; }
  const float* grad(const ParamInfo& p) const noexcept { return grads_ + p.offset; }

  std::size_t numel() const noexcept { return total_; }  // arena length, gaps included
  std::size_t bytes() const noexcept { return total_ * sizeof(float); }
  void zero_grads();

  const ParamInfo* find(const std::string& name) const;  // null when absent
  const ParamInfo& at(const std::string& name) const;    // throws Errc::invalid_argument
  std::size_t size() const noexcept { return infos_.size(); }
  const ParamInfo& operator[](std::size_t i) const { return infos_[i]; }
  // Registration order.
  const std::vector<ParamInfo>& infos() const noexcept { return infos_; }
  std::vector<ParamInfo>::const_iterator begin() const noexcept { return infos_.begin(); }
  std::vector<ParamInfo>::const_iterator end() const noexcept { return infos_.end(); }

  Device& device() const noexcept { return *dev_; }

  // Fills the owned slice of p from N(mean, std) keyed by (seed, stream_id(p.name), element
  // index in the LOGICAL tensor), so any layout gets bit-identical values. Padding stays 0.
  // only: fill just the elements inside these arena ranges [first, last) (null: all), with
  // the same values they would get in a full fill.
  using ArenaRanges = std::vector<std::pair<std::size_t, std::size_t>>;
  void init_normal(const ParamInfo& p, std::uint64_t seed, float mean, float std,
                   const ArenaRanges* only = nullptr);
  void init_constant(const ParamInfo& p, float value, const ArenaRanges* only = nullptr);
  // Fills the owned slice of p from `logical`, the whole logical tensor on the host
  // (p.logical_numel() floats, row-major), within `only` as init_normal does.
  void set_values(const ParamInfo& p, const float* logical, const ArenaRanges* only = nullptr);

 private:
  Device* dev_;
  std::vector<ParamInfo> infos_;
  std::unordered_map<std::string, std::size_t> index_;
  // Each '/'-prefix of a registered name ("a" and "a/b" of "a/b/c"), with one name under it:
  // a checkpoint group, which no parameter may also name.
  std::unordered_map<std::string, std::string> groups_;
  std::size_t total_ = 0;
  bool units_ = false;  // start_unit() was called: allocate() aligns the end
  DeviceBuffer param_buf_, grad_buf_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
};

}  // namespace dtrain
