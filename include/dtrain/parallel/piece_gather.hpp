#pragma once
// Every rank's piece of an arena range to all ranks, in place: ZeRO 1/2 sharing the updated
// parameters. Under mixed precision the pieces hold exact values of the 16-bit format (the
// masters rounded), so they can travel as 16-bit words: half the bytes of fp32, the same
// values after widening.
#include <cstddef>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/core/dtype.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/parallel/buckets.hpp"

namespace dtrain::parallel {

class DTRAIN_API PieceGather {
 public:
  // arena[unit] <- every rank's piece; mine: this rank's piece of unit, counts: each rank's
  // element count (rank order, summing to the unit). wire: DType::f32, or bf16/f16 when
  // every piece holds exact values of that format. Collective over dp.
  void all_gather_v(Communicator& dp, Device& dev, float* arena, const Range& unit,
                    const Range& mine, const std::size_t* counts, DType wire);

 private:
  DeviceBuffer send16_, recv16_;  // the 16-bit words; grow to the largest unit, then reused
};

}  // namespace dtrain::parallel
