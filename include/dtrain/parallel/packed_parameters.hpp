#pragma once
// 16-bit parameter storage under mixed precision (docs/mixed-precision.md). Between their
// uses the parameters live only as 16-bit words: the arena holds exact values of the format
// (the masters rounded), so the words lose nothing. A unit is widened into the fp32 arena,
// which the kernels read, while a pass holds it, and the arena range is discarded again when
// the last holder releases it. The optimiser writes its rounded masters straight into the
// words (AdamW::write_params_as_16bit), and ZeRO 1/2 share them as words.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/core/dtype.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/parallel/buckets.hpp"
#include "dtrain/parallel/param_residency.hpp"

namespace dtrain::parallel {

class DTRAIN_API PackedParameters final : public ParamResidency {
 public:
  // params: the arena of numel floats; units: the ranges the passes acquire, disjoint and
  // covering the arena. arena_holds_values: the arena holds every parameter, all exact values
  // of fmt (bf16 or f16); they are packed into the words and the arena is discarded. Else
  // the words start at zero and the caller packs each unit as it writes it (pack_unit), so
  // that the whole arena never exists.
  PackedParameters(Device& dev, float* params, std::size_t numel, std::vector<Range> units,
                   DType fmt, bool arena_holds_values = true);

  // The unit's arena values rounded to the format into its words; the range is discarded.
  // For set-up, while no pass holds the unit.
  void pack_unit(int unit);

  void acquire(int unit, int next) override;  // widens the unit on its first holder
  void release(int unit) override;            // discards it after its last
  void acquire_all() override;
  void release_all() override;

  std::uint16_t* words() { return words_.as<std::uint16_t>(); }  // the whole arena, packed
  DType format() const noexcept { return fmt_; }
  std::size_t bytes() const noexcept { return words_.bytes(); }
  // Arena floats held at once: now, and the most in a pass so far (0 between passes).
  std::size_t held_numel() const noexcept { return held_numel_; }
  std::size_t peak_numel() const noexcept { return peak_numel_; }

 private:
  std::size_t size(int unit) const { return units_[unit].second - units_[unit].first; }
  void check(int unit) const;

  Device& dev_;
  float* params_;
  std::vector<Range> units_;
  DType fmt_;
  DeviceBuffer words_;
  std::vector<int> holders_;  // acquires not yet released, per unit
  std::size_t held_numel_ = 0;
  std::size_t peak_numel_ = 0;
};

}  // namespace dtrain::parallel
