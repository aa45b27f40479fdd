#pragma once
// Every rank's piece of an arena range to all ranks, in place, as 16-bit words. Under mixed
// precision the parameter pieces hold exact values of the 16-bit format (the masters
// rounded), so they can travel in half the bytes of fp32 and widen back to the same values:
// ZeRO 1/2 sharing the updated parameters (PieceGather), ZeRO 3 gathering units around their
// use (ParamGather, which keeps one WordGather per gather in flight).
#include <cstddef>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/core/dtype.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/parallel/buckets.hpp"

namespace dtrain::parallel {

// One 16-bit gather's buffers (grow-only): start() narrows this rank's piece and posts the
// gather of the words; once it is complete, widen() writes the unit's values into the arena.
class DTRAIN_API WordGather {
 public:
  // arena[unit]'s pieces; mine: this rank's piece of unit, counts: each rank's element count
  // (rank order, summing to the unit); fmt: bf16 or f16. Collective over dp.
  Request start(Communicator& dp, Device& dev, const float* arena, const Range& unit,
                const Range& mine, const std::size_t* counts, DType fmt);
  void widen(Device& dev, float* arena);  // arena[unit] <- the gathered words
  // Grows the buffers for pieces of up to `mine` and units of up to `unit` elements, so that
  // a later start() allocates nothing. Not collective.
  void reserve(Device& dev, std::size_t mine, std::size_t unit);

 private:
  DeviceBuffer send_, recv_;
  Range unit_{0, 0};
  DType fmt_ = DType::bf16;
};

class DTRAIN_API PieceGather {
 public:
  // arena[unit] <- every rank's piece (arguments as WordGather::start); wire: DType::f32, or
  // bf16/f16 when every piece holds exact values of that format (then dev is needed; an f32
  // gather does not use it and dev may be null). Collective over dp.
  void all_gather_v(Communicator& dp, Device* dev, float* arena, const Range& unit,
                    const Range& mine, const std::size_t* counts, DType wire);
  // As WordGather::reserve, for 16-bit gathers.
  void reserve(Device& dev, std::size_t mine, std::size_t unit) { words_.reserve(dev, mine, unit); }

 private:
  WordGather words_;
};

}  // namespace dtrain::parallel
