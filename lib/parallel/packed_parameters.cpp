#include "dtrain/parallel/packed_parameters.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"

namespace dtrain::parallel {

PackedParameters::PackedParameters(Device& dev, float* params, std::size_t numel,
                                   std::vector<Range> units, DType fmt, bool arena_holds_values)
    : dev_(dev),
      params_(params),
      units_(std::move(units)),
      fmt_(check_16bit_format(fmt, "PackedParameters")),
      words_(dev, sizeof(std::uint16_t) * numel) {
  std::vector<Range> sorted = units_;
  std::sort(sorted.begin(), sorted.end());
  std::size_t covered = 0;
  for (const Range& r : sorted) {
    DTRAIN_CHECK(r.first == covered && r.first < r.second, Errc::invalid_argument,
                 "PackedParameters: the units must tile the arena; [" << r.first << ", "
                     << r.second << ") follows " << covered);
    covered = r.second;
  }
  DTRAIN_CHECK(covered == numel, Errc::invalid_argument,
               "PackedParameters: the units cover " << covered << " of " << numel << " elements");
  holders_.assign(units_.size(), 0);
  if (!arena_holds_values) return;
  dev_.convert_to_16bit(words(), params_, static_cast<std::int64_t>(numel), fmt_);
  dev_.discard(params_, sizeof(float) * numel);
}

void PackedParameters::pack_unit(int unit) {
  check(unit);
  DTRAIN_CHECK(holders_[unit] == 0, Errc::internal,
               "PackedParameters: unit " << unit << " packed while a pass holds it");
  const Range& u = units_[unit];
  dev_.convert_to_16bit(words() + u.first, params_ + u.first, static_cast<std::int64_t>(size(unit)), fmt_);
  dev_.discard(params_ + u.first, sizeof(float) * size(unit));
}

void PackedParameters::check(int unit) const {
  DTRAIN_CHECK(unit >= 0 && static_cast<std::size_t>(unit) < units_.size(), Errc::internal,
               "PackedParameters: no unit " << unit);
}

void PackedParameters::acquire(int unit, int /*next: widening is local, nothing to start*/) {
  check(unit);
  if (holders_[unit]++ > 0) return;
  const Range& u = units_[unit];
  dev_.restore(params_ + u.first, sizeof(float) * size(unit));
  dev_.convert_from_16bit(params_ + u.first, words() + u.first,
                          static_cast<std::int64_t>(size(unit)), fmt_);
  held_numel_ += size(unit);
  peak_numel_ = std::max(peak_numel_, held_numel_);
}

void PackedParameters::release(int unit) {
  check(unit);
  DTRAIN_CHECK(holders_[unit] > 0, Errc::internal,
               "PackedParameters: unit " << unit << " released but not held");
  if (--holders_[unit] > 0) return;
  dev_.discard(params_ + units_[unit].first, sizeof(float) * size(unit));
  held_numel_ -= size(unit);
}

void PackedParameters::acquire_all() {
  const std::size_t peak = peak_numel_;
  for (std::size_t u = 0; u < units_.size(); ++u) acquire(static_cast<int>(u), -1);
  peak_numel_ = peak;
}

void PackedParameters::release_all() {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (holders_[u] == 0) continue;
    holders_[u] = 1;
    release(static_cast<int>(u));
  }
}

}  // namespace dtrain::parallel
