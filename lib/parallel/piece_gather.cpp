#include "dtrain/parallel/piece_gather.hpp"

#include <cstdint>

#include "dtrain/core/error.hpp"

namespace dtrain::parallel {
namespace {
void grow(DeviceBuffer& buf, Device& dev, std::size_t bytes) {
  if (buf.bytes() < bytes) buf = DeviceBuffer(dev, bytes);
}
}  // namespace

Request WordGather::start(Communicator& dp, Device& dev, const float* arena, const Range& unit,
                          const Range& mine, const std::size_t* counts, DType fmt) {
  fmt_ = check_16bit_format(fmt, "WordGather::start");
  unit_ = unit;
  const std::size_t n_mine = mine.second - mine.first;
  grow(send_, dev, sizeof(std::uint16_t) * n_mine);
  grow(recv_, dev, sizeof(std::uint16_t) * (unit.second - unit.first));
  dev.convert_to_16bit(send_.as<std::uint16_t>(), arena + mine.first,
                       static_cast<std::int64_t>(n_mine), fmt);
  return dp.iall_gather_v(send_.data(), recv_.data(), counts, fmt);
}

void WordGather::reserve(Device& dev, std::size_t mine, std::size_t unit) {
  grow(send_, dev, sizeof(std::uint16_t) * mine);
  grow(recv_, dev, sizeof(std::uint16_t) * unit);
}

void WordGather::widen(Device& dev, float* arena) {
  dev.convert_from_16bit(arena + unit_.first, recv_.as<std::uint16_t>(),
                         static_cast<std::int64_t>(unit_.second - unit_.first), fmt_);
}

void PieceGather::all_gather_v(Communicator& dp, Device* dev, float* arena, const Range& unit,
                               const Range& mine, const std::size_t* counts, DType wire) {
  if (wire == DType::f32) {
    dp.all_gather_v(arena + mine.first, arena + unit.first, counts, DType::f32);
    return;
  }
  DTRAIN_CHECK(dev != nullptr, Errc::invalid_argument, "a gather in 16 bits needs the device");
  words_.start(dp, *dev, arena, unit, mine, counts, wire).wait();
  words_.widen(*dev, arena);
}

}  // namespace dtrain::parallel
