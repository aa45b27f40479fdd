#include "dtrain/parallel/piece_gather.hpp"

#include <cstdint>

namespace dtrain::parallel {
namespace {
void grow(DeviceBuffer& buf, Device& dev, std::size_t bytes) {
  if (buf.bytes() < bytes) buf = DeviceBuffer(dev, bytes);
}
}  // namespace

void PieceGather::all_gather_v(Communicator& dp, Device& dev, float* arena, const Range& unit,
                               const Range& mine, const std::size_t* counts, DType wire) {
  if (wire == DType::f32) {
    dp.all_gather_v(arena + mine.first, arena + unit.first, counts, DType::f32);
    return;
  }
  check_16bit_format(wire, "PieceGather::all_gather_v");
  const std::size_t n_mine = mine.second - mine.first, n_unit = unit.second - unit.first;
  grow(send16_, dev, sizeof(std::uint16_t) * n_mine);
  grow(recv16_, dev, sizeof(std::uint16_t) * n_unit);
  auto* send = send16_.as<std::uint16_t>();
  auto* recv = recv16_.as<std::uint16_t>();
  dev.convert_to_16bit(send, arena + mine.first, static_cast<std::int64_t>(n_mine), wire);
  dp.all_gather_v(send, recv, counts, wire);
  dev.convert_from_16bit(arena + unit.first, recv, static_cast<std::int64_t>(n_unit), wire);
}

}  // namespace dtrain::parallel
