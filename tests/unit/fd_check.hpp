#pragma once
// Central-difference gradient checking shared by the kernel and model tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace dtrain::test {

template <class T> std::vector<T> random_vec(std::size_t n, std::uint32_t seed, T scale = T(1)) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen) * static_cast<double>(scale));
  return v;
}

struct FdStats {
  double max_rel = 0;
  std::size_t checked = 0;
};

// For every element of x: numerical d loss / d x[i] vs analytic[i]. The relative error is
// |a - n| / max(|a|, |n|, floor), so gradients that are (correctly) ~0 do not blow it up.
template <class T>
FdStats fd_check(const std::string& what, std::vector<T>& x, const std::vector<T>& analytic,
                 const std::function<double()>& loss, double h, double tol, double floor = 1e-6) {
  FdStats s;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T saved = x[i];
    x[i] = saved + static_cast<T>(h);
    const double fp = loss();
    x[i] = saved - static_cast<T>(h);
    const double fm = loss();
    x[i] = saved;
    const double num = (fp - fm) / (2 * h);
    const double a = static_cast<double>(analytic[i]);
    const double rel = std::abs(a - num) / std::max({std::abs(a), std::abs(num), floor});
    s.max_rel = std::max(s.max_rel, rel);
    ++s.checked;
    EXPECT_LE(rel, tol) << what << "[" << i << "]: analytic " << a << " numerical " << num;
  }
  return s;
}

// The larger of two errors, NaN if either is (std::max keeps its first argument against a
// NaN, which would let a NaN result pass an "error < bound" check).
inline double worse(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

// sum_i out[i] * w[i]: a scalar objective with a generic upstream gradient w.
template <class T> double dot(const std::vector<T>& out, const std::vector<T>& w) {
  double s = 0;
  for (std::size_t i = 0; i < out.size(); ++i)
    s += static_cast<double>(out[i]) * static_cast<double>(w[i]);
  return s;
}

// Backward accumulates: run it on g0 and return (result - g0).
template <class T> std::vector<T> minus(const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<T> r(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) r[i] = a[i] - b[i];
  return r;
}

}  // namespace dtrain::test
