#include "dtrain/parallel/fixed_order_sum.hpp"

#include "dtrain/core/error.hpp"
#include "dtrain/core/timer.hpp"

namespace dtrain::parallel {

FixedOrderSum::FixedOrderSum(Device& dev, Communicator& dp, std::vector<Range> units,
                             std::vector<std::vector<std::size_t>> counts,
                             int local_micro_batches)
    : dev_(dev),
      dp_(dp),
      units_(std::move(units)),
      counts_(std::move(counts)),
      local_(local_micro_batches),
      all_losses_(static_cast<std::size_t>(local_micro_batches) * dp.size()) {
  DTRAIN_CHECK(local_micro_batches > 0, Errc::invalid_argument, "no micro-batches to sum");
  check_split(units_, counts_, dp.size(), "FixedOrderSum");
  for (std::size_t u = 0; u < units_.size(); ++u) {
    owned_.push_back(piece_of(units_[u], counts_[u], dp.rank()));
    owned_numel_ += owned_.back().second - owned_.back().first;
  }
  const auto peers = static_cast<std::size_t>(dp.size() - 1);
  inbox_ = DeviceBuffer(dev, sizeof(float) * owned_numel_ * peers);
  total_ = DeviceBuffer(dev, sizeof(float) * owned_numel_);
  requests_.reserve(2 * peers * units_.size());
}

float* FixedOrderSum::inbox(int peer) {
  const int slot = peer < dp_.rank() ? peer : peer - 1;
  return inbox_.as<float>() + static_cast<std::size_t>(slot) * owned_numel_;
}

void FixedOrderSum::add(int m, const float* grads) {
  const int P = dp_.size(), me = dp_.rank();
  DTRAIN_CHECK(m == 0 || m == next_m_, Errc::internal,
               "FixedOrderSum: micro-batch " << m << " added after " << next_m_ - 1
                                             << " (they must come in order)");
  next_m_ = m + 1;
  Stopwatch watch;
  requests_.clear();
  // One tag for every unit: MPI matches a pair of ranks' messages of one tag in the order
  // posted, and both sides post in unit order (a tag per unit would pass MPI_TAG_UB, at
  // least 32767, in a model of as many layers). Not 0, point-to-point's default tag.
  constexpr int tag = 1531;
  for (int p = 0; p < P; ++p) {
    if (p == me) continue;
    std::size_t at = 0;  // pieces arrive back to back in unit order, as total_ holds them
    for (std::size_t u = 0; u < units_.size(); ++u) {
      const std::size_t mine = counts_[u][me], theirs = counts_[u][p];
      if (mine > 0) requests_.push_back(dp_.irecv(inbox(p) + at, mine, DType::f32, p, tag));
      if (theirs > 0) {
        const Range piece = piece_of(units_[u], counts_[u], p);
        requests_.push_back(dp_.isend(grads + piece.first, theirs, DType::f32, p, tag));
      }
      at += mine;
    }
  }
  for (Request& r : requests_) r.wait();
  wait_seconds_ += watch.seconds();
  // Fold in rank order: micro-batch k = m * P + p.
  float* total = total_.as<float>();
  for (int p = 0; p < P; ++p) {
    const bool first = m == 0 && p == 0;
    std::size_t at = 0;
    for (const Range& piece : owned_) {
      const std::size_t n = piece.second - piece.first;
      const float* src = p == me ? grads + piece.first : inbox(p) + at;
      if (first) {
        dev_.copy_floats(total + at, src, static_cast<std::int64_t>(n));
      } else {
        dev_.accumulate(total + at, src, static_cast<std::int64_t>(n));
      }
      at += n;
    }
  }
}

void FixedOrderSum::sum_owned(float* out) {
  std::size_t at = 0;
  for (const Range& piece : owned_) {
    const std::size_t n = piece.second - piece.first;
    dev_.copy_floats(out + piece.first, total_.as<float>() + at, static_cast<std::int64_t>(n));
    at += n;
  }
}

void FixedOrderSum::sum(float* out) {
  sum_owned(out);
  all_gather(out);
}

void FixedOrderSum::all_gather(float* arena, DType wire) {
  if (dp_.size() == 1) return;
  Stopwatch watch;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    share_.all_gather_v(dp_, &dev_, arena, units_[u], owned_[u], counts_[u].data(), wire);
  }
  wait_seconds_ += watch.seconds();
}

void FixedOrderSum::all_gather_words(std::uint16_t* words, DType fmt) {
  if (dp_.size() == 1) return;
  check_16bit_format(fmt, "FixedOrderSum::all_gather_words");
  Stopwatch watch;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    dp_.all_gather_v(words + owned_[u].first, words + units_[u].first, counts_[u].data(), fmt);
  }
  wait_seconds_ += watch.seconds();
}

double FixedOrderSum::sum_losses(const double* local_losses) {
  const int P = dp_.size();
  // Gathered rank-major: rank p's local m sits at p*local_ + m; fold in k = m*P + p order.
  dp_.all_gather(local_losses, all_losses_.data(), static_cast<std::size_t>(local_), DType::f64);
  double total = 0;
  for (int m = 0; m < local_; ++m)
    for (int p = 0; p < P; ++p) total += all_losses_[static_cast<std::size_t>(p) * local_ + m];
  return total;
}

}  // namespace dtrain::parallel
