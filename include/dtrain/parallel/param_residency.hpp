#pragma once
// Parameters that the fp32 arena holds only around their use: ZeRO 3 gathers each unit from
// the ranks' pieces (ParamGather); 16-bit parameter storage widens it from the packed words
// (PackedParameters). The model's passes call acquire(unit, next) before reading a unit and
// release(unit) after (GptModel::ParamUseHooks); the units are the model's grad-ready ranges.
#include "dtrain/export.hpp"

namespace dtrain::parallel {

class DTRAIN_API ParamResidency {
 public:
  virtual ~ParamResidency() = default;
  // Pairs nest: a unit stays in the arena until every acquire of it is released. `next` is
  // the unit the pass acquires after this one (a hint; -1 for none).
  virtual void acquire(int unit, int next) = 0;
  virtual void release(int unit) = 0;
  virtual void poll() {}  // lets work in flight progress; never blocks
  // Every unit in the arena and held (a checkpoint written or read whole) / all let go. The
  // peak held in a pass does not count this.
  virtual void acquire_all() = 0;
  virtual void release_all() = 0;

  // Whether a HeldParameters scope holds every unit now. The held arena does not follow
  // changes of the stored parameters (an update, a checkpoint load), so the Trainer refuses
  // those inside such a scope.
  bool held_whole() const noexcept { return whole_scopes_ > 0; }

 private:
  friend class HeldParameters;
  int whole_scopes_ = 0;
};

// Every unit held for the scope's lifetime; a no-op for null. Collective over the data
// parallel group for ZeRO 3. Scopes nest: the outermost one acquires and releases.
class DTRAIN_API HeldParameters {
 public:
  explicit HeldParameters(ParamResidency* residency) : residency_(residency) {
    if (!residency_) return;
    if (residency_->whole_scopes_ == 0) residency_->acquire_all();
    ++residency_->whole_scopes_;
  }
  ~HeldParameters();
  HeldParameters(const HeldParameters&) = delete;
  HeldParameters& operator=(const HeldParameters&) = delete;

 private:
  ParamResidency* residency_;
};

}  // namespace dtrain::parallel
