#pragma once
// One JSON object per logged step, appended to --metrics FILE (DESIGN.md contract).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "dtrain/export.hpp"

namespace dtrain::train {

// Bytes a rank holds, by kind (the peak over the run so far).
struct DTRAIN_API MemoryUse {
  std::uint64_t params = 0;
  std::uint64_t grads = 0;
  std::uint64_t optimizer = 0;
  std::uint64_t activations = 0;
  std::uint64_t total() const { return params + grads + optimizer + activations; }
};

struct DTRAIN_API StepMetrics {
  long step = 0;  // 1-based: the number of optimiser steps taken
  double loss = 0;
  double val_loss = -1;  // negative: not evaluated at this step
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double step_ms = 0;
  double mfu = 0;
  // fp16 only (absent from the JSON when negative): the loss scale the step's backward used,
  // and the steps skipped so far because their gradients overflowed.
  double loss_scale = -1;
  long skipped_steps = -1;
  std::vector<MemoryUse> memory_per_rank;  // index = world rank
};

DTRAIN_API std::string to_json(const StepMetrics& m);

class DTRAIN_API MetricsWriter {
 public:
  MetricsWriter() = default;
  // For append; throws Error(Errc::io). Provisional: a file this call creates is removed
  // again by the destructor unless keep() comes first (a run whose set-up fails leaves no
  // empty metrics file behind).
  void open(const std::string& path, bool provisional = false);
  void keep() noexcept { provisional_ = false; }
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const StepMetrics& m);  // no-op when no file is open
  bool is_open() const { return file_ != nullptr; }

 private:
  std::FILE* file_ = nullptr;
  bool write_failed_ = false;  // warned once
  std::string created_;        // the path open() created, if it did
  bool provisional_ = false;
};

}  // namespace dtrain::train
