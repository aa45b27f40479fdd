#pragma once
// Optimisers as pure updates over flat buffers. They see only (offset, length, decay?)
// segments of the parameter arena, so the same code runs on a whole model or on a ZeRO
// shard of it. State lives in buffers allocated once from the device.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"

namespace dtrain::optim {

// A contiguous run of the flat arena with one weight-decay rule.
struct DTRAIN_API Segment {
  std::size_t offset = 0;
  std::size_t numel = 0;
  bool decay = true;
};

// Calls fn(offset, numel, first) for each run of segments that follow each other in the
// arena (one ends where the next begins), `first` being the index of the run's first segment:
// a per-element pass that ignores the decay rule (a rounding, a finiteness check) covers a
// run in one device call instead of one a segment.
template <class Fn> void for_each_contiguous_run(const std::vector<Segment>& segments, Fn fn) {
  std::size_t first = 0;
  for (std::size_t i = 1; i <= segments.size(); ++i) {
    const Segment& last = segments[i - 1];
    if (i < segments.size() && segments[i].offset == last.offset + last.numel) continue;
    fn(segments[first].offset, last.offset + last.numel - segments[first].offset, first);
    first = i;
  }
}

struct DTRAIN_API AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class DTRAIN_API AdamW {
 public:
  // numel: length of the arena the segments index into. The moments are compact: they hold
  // only the segments' elements, segment after segment (so a ZeRO shard's state is small).
  AdamW(Device& dev, std::vector<Segment> segments, std::size_t numel, AdamWConfig cfg);

  // One update of every segment; grads are multiplied by grad_scale first (for clipping,
  // and the 1/scale of loss scaling). With master weights the update goes to the masters
  // and the arena's segments (or the 16-bit words, write_params_as_16bit) get the masters
  // rounded to the low-precision format.
  void step(float* params, const float* grads, float lr, float grad_scale = 1.0f);

  // Mixed precision (docs/mixed-precision.md): keep fp32 master weights of the segments,
  // compact like the moments (so a ZeRO shard holds only its own), and from now on keep the
  // arena's segments equal to the masters rounded to `low` (bf16 or f16). Takes the masters
  // from the arena's current values and rounds the arena. Call at set-up (it allocates).
  void use_master_weights(float* params, DType low);
  // The same, set up piece by piece (16-bit storage never holds the whole fp32 arena): the
  // masters start at zero and take_master_weights() fills those of an arena range from the
  // arena's current values, unrounded; the caller rounds the arena (or the words) itself.
  void use_master_weights(DType low);
  void take_master_weights(const float* params, std::size_t first, std::size_t last);
  bool has_master_weights() const { return low_ != DType::f32; }
  DType low_precision() const { return low_; }
  float* master_weights() { return w_.as<float>(); }
  // masters <- the arena's segments, then the arena's segments <- the masters rounded.
  // No-op without master weights.
  void load_master_weights(float* params);
  // The arena's segments (or the 16-bit words) <- the masters rounded, e.g. after a
  // checkpoint load set the masters. No-op without master weights.
  void round_params(float* params);
  // 16-bit parameter storage (parallel::PackedParameters): from now on the rounded masters
  // go to these words, at the segments' offsets (words[i] is arena element i), instead of
  // the arena. Needs master weights; null goes back to the arena.
  void write_params_as_16bit(std::uint16_t* words);

  long steps_taken() const { return step_; }
  void set_steps_taken(long s) { step_ = s; }
  // Moments, compact: segment i's state starts at state_offset(i).
  float* exp_avg() { return m_.as<float>(); }
  float* exp_avg_sq() { return v_.as<float>(); }
  std::size_t state_numel() const { return m_.bytes() / sizeof(float); }  // of each moment
  std::size_t state_offset(std::size_t segment) const { return state_offsets_[segment]; }
  const std::vector<Segment>& segments() const { return segments_; }
  std::size_t state_bytes() const { return m_.bytes() + v_.bytes() + w_.bytes(); }
  const AdamWConfig& config() const { return cfg_; }

 private:
  // The segments as step()'s device ranges: into the arena, or into the masters once they exist.
  void plan_ranges();
  // n rounded masters to the words (when set) or the arena, from arena element `offset` on.
  void write_rounded(float* params, std::size_t offset, const float* masters, std::size_t n);

  Device& dev_;
  std::vector<Segment> segments_;
  std::vector<std::size_t> state_offsets_;
  AdamWConfig cfg_;
  DeviceBuffer m_, v_;
  DeviceBuffer w_;              // fp32 master weights (mixed precision only)
  DType low_ = DType::f32;      // the arena's format when w_ is used
  std::uint16_t* words_ = nullptr;  // where the rounded masters go instead, when set
  std::vector<AdamWRange> ranges_;  // step()'s device ranges, one a segment (plan_ranges)
  long step_ = 0;
};

class DTRAIN_API Sgd {
 public:
  Sgd(Device& dev, std::vector<Segment> segments, std::size_t numel, float momentum,
      float weight_decay);
  void step(float* params, const float* grads, float lr, float grad_scale = 1.0f);
  std::size_t state_bytes() const { return momentum_buf_.bytes(); }

 private:
  Device& dev_;
  std::vector<Segment> segments_;
  float momentum_;
  float weight_decay_;
  std::vector<std::size_t> state_offsets_;
  DeviceBuffer momentum_buf_;
};

// The factor that clips a gradient of global norm `norm` to at most max_norm (1 when
// max_norm is 0 or the norm is already small enough). Non-finite norms give 1 so the
// caller's overflow handling sees them.
DTRAIN_API float clip_factor(double norm, double max_norm);

}  // namespace dtrain::optim
