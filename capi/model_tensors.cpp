// A built-in model's parameters: all of them at once, or one tensor by name or index; its
// step count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agree.hpp"
#include "model.hpp"

using namespace dtrain::capi;

namespace {

// The tensor called name; an unknown name is the caller's error, reported with the name.
const dtrain::ParamInfo& tensor(dt_model_s& m, const char* name) {
  need_ptr(name, "name");
  const dtrain::ParamInfo* p = m.params().find(name);
  if (!p)
    fail(DT_ERR_INVALID_ARGUMENT, std::string("the model has no parameter named '") + name + "'" +
                                      (m.pp() ? " on this pipeline stage" : ""));
  return *p;
}

// Whole tensors: under tensor parallelism as many values as on one rank.
std::size_t total_numel(dtrain::ParameterStore& ps) {
  std::size_t n = 0;
  for (const dtrain::ParamInfo& p : ps) n += p.logical_numel();
  return n;
}

// The whole tensor p into host dst (p.logical_numel() floats). A tensor split over the TP
// group: every rank puts its slice at its place and zero bits elsewhere, and the group sums
// the bit patterns as integers (collective over TP): each element comes, bit for bit, from
// the one rank that holds it (-0.0 too, which a float sum would turn into +0.0).
void read_tensor(dt_model_s& m, const dtrain::ParamInfo& p, float* dst) {
  const float* src = m.params().param(p);
  dtrain::Communicator* tp = m.tp();
  if (!tp || !p.tp_sharded) {
    m.device().copy(dst, src, p.local_numel() * sizeof(float), dtrain::CopyKind::device_to_host);
    return;
  }
  std::vector<float> slice(p.local_numel());
  m.device().copy(slice.data(), src, slice.size() * sizeof(float), dtrain::CopyKind::device_to_host);
  std::fill(dst, dst + p.logical_numel(), 0.0f);
  for (std::size_t i = 0; i < slice.size(); ++i) dst[p.logical_index(i)] = slice[i];
  tp->all_reduce(dst, dst, p.logical_numel(), dtrain::DType::i32, dtrain::ReduceOp::sum);
}

// This rank's slice of a whole tensor (p.logical_numel() floats): `whole` itself unless
// tensor parallelism splits p, else `slice`, filled.
const float* local_values(dt_model_s& m, const dtrain::ParamInfo& p, const float* whole,
                          std::vector<float>& slice) {
  if (!m.tp() || !p.tp_sharded) return whole;
  slice.resize(p.local_numel());
  for (std::size_t i = 0; i < slice.size(); ++i) slice[i] = whole[p.logical_index(i)];
  return slice.data();
}

}  // namespace

// This rank's slice of a whole tensor (p.logical_numel() floats) as the runs of its arena to
// write: under ZeRO 3 only the parts in this rank's pieces, since every rank is given the
// same values and the rest would be dropped at the next pass.
std::vector<ArenaWrite> dtrain::capi::arena_writes(dt_model_s& m, const dtrain::ParamInfo& p, const float* whole) {
  std::vector<float> slice;
  const float* src = local_values(m, p, whole, slice);
  const std::size_t first = p.offset, last = p.offset + p.local_numel();
  if (!m.engine->gather()) return {{first, std::vector<float>(src, src + p.local_numel())}};
  std::vector<ArenaWrite> writes;
  for (const dtrain::parallel::Range& r : m.engine->owned()) {
    const std::size_t lo = std::max(first, r.first), hi = std::min(last, r.second);
    if (lo < hi) writes.push_back({lo, std::vector<float>(src + (lo - first), src + (hi - first))});
  }
  return writes;
}

void dtrain::capi::write_arena(dt_model_s& m, const std::vector<ArenaWrite>& writes) {
  for (const ArenaWrite& w : writes)
    m.device().copy(m.params().params() + w.offset, w.values.data(), w.values.size() * sizeof(float),
                    dtrain::CopyKind::host_to_device);
}

void dtrain::capi::share_tied_embedding(dt_model_s& m) {
  if (!m.tied) return;
  // Who was given values: the first stage (rank 0 of the pair: 2) wins over the last (1).
  int given = m.tied_written.empty() ? 0 : m.tied->rank() == 0 ? 2 : 1, from = 0;
  m.tied->all_reduce(&given, &from, 1, dtrain::DType::i32, dtrain::ReduceOp::max);
  if (from == 0) return;
  const dtrain::ParamInfo& p = m.params().at("wte");
  const int root = from == 2 ? 0 : 1;
  const bool receiving = m.tied->rank() != root;
  std::vector<float> received;
  // The receiver's buffer, agreed: out of memory, both ends fail and the values stay pending.
  agreed_checks(*m.tied, true, [&] {
    if (receiving) received.resize(p.local_numel());
  });
  std::vector<float>& values = receiving ? received : m.tied_written;
  m.tied->broadcast(values.data(), values.data(), values.size(), dtrain::DType::f32, root);
  if (receiving) {  // no ZeRO 3 with pipeline stages: the arena holds the whole slice
    m.device().copy(m.params().param(p), values.data(), values.size() * sizeof(float),
                    dtrain::CopyKind::host_to_device);
    m.engine->parameters_written(p.offset, p.offset + p.local_numel());
  }
  m.tied_written = {};  // handed over (or, on the last stage, overruled by the first)
}

extern "C" {

dt_result_t dt_model_num_parameters(dt_model_t model, size_t* count) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    need_ptr(count, "count");
    *count = total_numel(m.params());
  });
}

dt_result_t dt_model_num_logits(dt_model_t model, int* count) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    need_ptr(count, "count");
    *count = m.num_logits();
  });
}

dt_result_t dt_model_get_parameters(dt_model_t model, float* dst, size_t capacity) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    dtrain::ParameterStore& ps = m.params();
    // ZeRO 3 and tensor parallelism: collective
    agreed_model_checks(m, m.engine->gather() != nullptr, [&] {
      need_ptr(dst, "dst");
      need(capacity >= total_numel(ps), "capacity is smaller than dt_model_num_parameters()");
    });
    // ZeRO 3: the units of one tensor at a time, held on while the next tensors share them.
    std::unique_ptr<HeldUnits> held;
    std::vector<int> held_units;
    for (const dtrain::ParamInfo& p : ps) {
      std::vector<int> units = m.engine->units_overlapping(p.offset, p.offset + p.numel);
      if (m.engine->gather() && units != held_units) {
        held.reset();
        held = std::make_unique<HeldUnits>(*m.engine, p.offset, p.offset + p.numel);
        held_units = std::move(units);
      }
      read_tensor(m, p, dst);
      dst += p.logical_numel();
    }
  });
}

dt_result_t dt_model_steps(dt_model_t model, long* steps) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    need_ptr(steps, "steps");
    *steps = m.engine->steps();
  });
}

dt_result_t dt_model_num_tensors(dt_model_t model, int* count) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    need_ptr(count, "count");
    *count = static_cast<int>(m.params().size());
  });
}

dt_result_t dt_model_tensor_name(dt_model_t model, int index, char* name, size_t capacity,
                                 size_t* length) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    need_ptr(length, "length");
    need(index >= 0 && static_cast<std::size_t>(index) < m.params().size(),
         "index must be in [0, dt_model_num_tensors())");
    const std::string& n = m.params()[static_cast<std::size_t>(index)].name;
    *length = n.size();
    if (capacity == 0 && !name) return;  // length query
    need_ptr(name, "name");
    need(capacity > n.size(), "capacity is too small for the name and its NUL");
    std::memcpy(name, n.c_str(), n.size() + 1);
  });
}

dt_result_t dt_model_tensor_shape(dt_model_t model, const char* name, int64_t* shape, int capacity,
                                  int* ndim) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    const dtrain::ParamInfo& p = tensor(m, name);
    need_ptr(ndim, "ndim");
    *ndim = static_cast<int>(p.shape.size());
    if (capacity == 0 && !shape) return;  // ndim query
    need_ptr(shape, "shape");
    need(capacity >= *ndim, "capacity is smaller than the tensor's number of dimensions");
    for (int d = 0; d < *ndim; ++d) shape[d] = p.shape[static_cast<std::size_t>(d)];
  });
}

dt_result_t dt_model_get_tensor(dt_model_t model, const char* name, float* dst, size_t capacity) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    const dtrain::ParamInfo* found = nullptr;
    // ZeRO 3 and tensor parallelism: collective
    agreed_model_checks(m, m.engine->gather() != nullptr, [&] {
      found = &tensor(m, name);
      need_ptr(dst, "dst");
      need(capacity >= found->logical_numel(), "capacity is smaller than the tensor's element count");
    });
    const dtrain::ParamInfo& p = *found;
    // Ranks naming different tensors would gather (or sum over TP) different sizes.
    if (dtrain::Communicator* callers = m.callers(m.engine->gather() != nullptr))
      if (!same_value(*callers, fnv1a(p.name.data(), p.name.size())))
        fail(DT_ERR_INVALID_ARGUMENT, "the ranks of this collective call named different "
                                      "tensors: they must ask for the same one");
    HeldUnits whole(*m.engine, p.offset, p.offset + p.numel);  // ZeRO 3
    read_tensor(m, p, dst);
  });
}

dt_result_t dt_model_set_tensor(dt_model_t model, const char* name, const float* src, size_t count) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    const dtrain::ParamInfo* found = nullptr;
    agreed_model_checks(m, false, [&] {  // tensor parallelism: collective over the TP group
      found = &tensor(m, name);
      need_ptr(src, "src");
      if (count != found->logical_numel())
        fail(DT_ERR_INVALID_ARGUMENT, "count is " + std::to_string(count) + " but tensor '" +
                                          found->name + "' has " +
                                          std::to_string(found->logical_numel()) + " elements");
      // One NaN or inf would spread through every later step (only fp16 skips such steps).
      const float* bad = std::find_if(src, src + count, [](float v) { return !std::isfinite(v); });
      if (bad != src + count)
        fail(DT_ERR_INVALID_ARGUMENT, "src[" + std::to_string(bad - src) + "] of tensor '" + found->name +
                                          "' is not finite (" + std::to_string(*bad) + ")");
    });
    const dtrain::ParamInfo& p = *found;
    const std::uint64_t named = fnv1a(p.name.data(), p.name.size());
    need_same_inputs(m, m.tp() ? fnv1a(src, count * sizeof(float), named) : 0, "tensor names or values",
                     false, false);
    std::vector<float> for_other_end;  // a tied wte: kept for the other end of the pipeline
    if (m.tied && p.name == "wte") {   // (allocated before anything changes)
      std::vector<float> slice;
      const float* mine = local_values(m, p, src, slice);
      for_other_end.assign(mine, mine + p.local_numel());
    }
    write_arena(m, arena_writes(m, p, src));
    m.engine->parameters_written(p.offset, p.offset + p.local_numel());  // mixed precision
    if (!for_other_end.empty()) m.tied_written.swap(for_other_end);
    m.decoded_text_stale = true;
  });
}

}  // extern "C"
