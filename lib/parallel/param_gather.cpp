#include "dtrain/parallel/param_gather.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timer.hpp"

namespace dtrain::parallel {

ParamGather::ParamGather(Communicator& dp, Device& dev, float* params, std::vector<Range> units,
                         std::vector<std::vector<std::size_t>> counts)
    : dp_(dp), dev_(dev), params_(params), units_(std::move(units)), counts_(std::move(counts)) {
  check_split(units_, counts_, dp.size(), "ParamGather");
  const std::size_t n = units_.size();
  for (std::size_t u = 0; u < n; ++u) {
    owned_.push_back(piece_of(units_[u], counts_[u], dp.rank()));
    owned_numel_ += counts_[u][dp.rank()];
  }
  holders_.assign(n, 0);
  gathered_.assign(n, true);  // the arena starts full: drop what this rank does not own
  pending_.resize(n);
  words_of_.assign(n, -1);
  held_numel_ = owned_numel_;
  for (std::size_t u = 0; u < n; ++u) held_numel_ += size(static_cast<int>(u)) - counts_[u][dp.rank()];
  for (std::size_t u = 0; u < n; ++u) drop(static_cast<int>(u));
  peak_numel_ = held_numel_;
}

ParamGather::~ParamGather() {
  for (Request& r : pending_) {
    try {
      r.wait();
    } catch (...) {  // a failed gather during unwinding: nothing left to protect
    }
  }
}

void ParamGather::set_wire(DType wire) {
  wire_ = check_float_format(wire, "ParamGather::set_wire");
  // Land what is in flight now, so that nothing gathered in one format is widened as the
  // other.
  for (std::size_t u = 0; u < units_.size(); ++u) complete(static_cast<int>(u));
}

void ParamGather::start(int unit) {
  if (gathered_[unit]) return;
  const Range& u = units_[unit];
  const Range& mine = owned_[unit];
  dev_.restore(params_ + u.first, sizeof(float) * (mine.first - u.first));
  dev_.restore(params_ + mine.second, sizeof(float) * (u.second - mine.second));
  if (wire_ == DType::f32) {
    pending_[unit] = dp_.iall_gather_v(params_ + mine.first, params_ + u.first,
                                       counts_[unit].data(), DType::f32);
  } else {
    const int w = take_words();
    pending_[unit] = words_[w].gather.start(dp_, dev_, params_, u, mine,
                                            counts_[unit].data(), wire_);
    words_of_[unit] = w;
  }
  gathered_[unit] = true;
  held_numel_ += size(unit) - (mine.second - mine.first);
  peak_numel_ = std::max(peak_numel_, held_numel_);
}

void ParamGather::complete(int unit) {
  if (pending_[unit].valid()) {  // not when poll() has seen it finish already
    Stopwatch watch;
    pending_[unit].wait();
    wait_seconds_ += watch.seconds();
  }
  const int w = words_of_[unit];
  if (w < 0) return;
  words_of_[unit] = -1;
  words_[w].gather.widen(dev_, params_);
  words_[w].busy = false;
}

int ParamGather::take_words() {
  std::size_t w = 0;
  while (w < words_.size() && words_[w].busy) ++w;
  if (w == words_.size()) words_.emplace_back();
  words_[w].busy = true;
  return static_cast<int>(w);
}

void ParamGather::drop(int unit) {
  if (!gathered_[unit]) return;
  complete(unit);  // never discard under a gather in flight
  const Range& u = units_[unit];
  const Range& mine = owned_[unit];
  dev_.discard(params_ + u.first, sizeof(float) * (mine.first - u.first));
  dev_.discard(params_ + mine.second, sizeof(float) * (u.second - mine.second));
  gathered_[unit] = false;
  held_numel_ -= size(unit) - (mine.second - mine.first);
}

void ParamGather::acquire(int unit, int next) {
  DTRAIN_CHECK(unit >= 0 && static_cast<std::size_t>(unit) < units_.size(), Errc::internal,
               "ParamGather: no unit " << unit);
  start(unit);
  if (next >= 0 && static_cast<std::size_t>(next) < units_.size()) start(next);  // prefetch
  complete(unit);
  ++holders_[unit];
}

void ParamGather::poll() {
  for (Request& r : pending_) {
    if (r.valid()) r.test();
  }
}

void ParamGather::release(int unit) {
  DTRAIN_CHECK(unit >= 0 && static_cast<std::size_t>(unit) < units_.size() && holders_[unit] > 0,
               Errc::internal, "ParamGather: unit " << unit << " released but not held");
  if (--holders_[unit] == 0) {
    // A prefetched unit that no pass acquires stays until release_all() or drop_unheld().
    drop(unit);
  }
}

void ParamGather::acquire_all() {
  // fp32 words: all units are in flight at once, and 16-bit ones would need a buffer pair
  // per unit (the whole arena again, kept by the grow-only pool).
  const DType wire = wire_;
  const std::size_t peak = peak_numel_;
  wire_ = DType::f32;
  for (std::size_t u = 0; u < units_.size(); ++u) start(static_cast<int>(u));
  wire_ = wire;
  for (std::size_t u = 0; u < units_.size(); ++u) acquire(static_cast<int>(u), -1);
  peak_numel_ = peak;
}

void ParamGather::release_all() {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    holders_[u] = 0;
    drop(static_cast<int>(u));
  }
}

void ParamGather::drop_unheld() {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    DTRAIN_CHECK(holders_[u] == 0, Errc::internal,
                 "ParamGather: unit " << u << " is still held when the parameters change");
    drop(static_cast<int>(u));
  }
}

std::unique_ptr<ParamGather> gather_by_bucket(Communicator& dp, Device& dev, float* params,
                                              const GradientSync& sync) {
  std::vector<Range> units;
  std::vector<std::vector<std::size_t>> counts;
  for (std::size_t b = 0; b < sync.buckets().size(); ++b) {
    units.push_back({sync.buckets()[b].first, sync.buckets()[b].last});
    counts.push_back(sync.piece_counts(b));
  }
  return std::make_unique<ParamGather>(dp, dev, params, std::move(units), std::move(counts));
}

}  // namespace dtrain::parallel
