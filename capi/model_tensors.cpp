// A built-in model's parameters: all of them at once, or one tensor by name or index; its
// step count.
#include <algorithm>
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
  if (!p) fail(DT_ERR_INVALID_ARGUMENT, std::string("the model has no parameter named '") + name + "'");
  return *p;
}

std::size_t total_numel(dtrain::ParameterStore& ps) {
  std::size_t n = 0;
  for (const dtrain::ParamInfo& p : ps) n += p.local_numel();
  return n;
}

// Writes a whole tensor into the arena; under ZeRO 3 only the parts in this rank's pieces,
// since every rank is given the same values and the rest would be dropped at the next pass.
void write_tensor(dt_model_s& m, const dtrain::ParamInfo& p, const float* src) {
  float* arena = m.params().params();
  const std::size_t first = p.offset, last = p.offset + p.local_numel();
  if (!m.engine->gather()) {
    m.device().copy(arena + first, src, p.local_numel() * sizeof(float), dtrain::CopyKind::host_to_device);
    return;
  }
  for (const dtrain::parallel::Range& r : m.engine->owned()) {
    const std::size_t lo = std::max(first, r.first), hi = std::min(last, r.second);
    if (lo < hi)
      m.device().copy(arena + lo, src + (lo - first), (hi - lo) * sizeof(float),
                      dtrain::CopyKind::host_to_device);
  }
}

}  // namespace

extern "C" {

dt_result_t dt_model_num_parameters(dt_model_t model, size_t* count) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    need_ptr(count, "count");
    *count = total_numel(m.params());
  });
}

dt_result_t dt_model_get_parameters(dt_model_t model, float* dst, size_t capacity) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    dtrain::ParameterStore& ps = m.params();
    agreed_checks(m.engine->dp(), m.engine->gather() != nullptr, [&] {  // ZeRO 3: collective
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
      m.device().copy(dst, ps.param(p), p.local_numel() * sizeof(float), dtrain::CopyKind::device_to_host);
      dst += p.local_numel();
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
    agreed_checks(m.engine->dp(), m.engine->gather() != nullptr, [&] {  // ZeRO 3: collective
      found = &tensor(m, name);
      need_ptr(dst, "dst");
      need(capacity >= found->local_numel(), "capacity is smaller than the tensor's element count");
    });
    const dtrain::ParamInfo& p = *found;
    HeldUnits whole(*m.engine, p.offset, p.offset + p.numel);  // ZeRO 3
    m.device().copy(dst, m.params().param(p), p.local_numel() * sizeof(float),
                    dtrain::CopyKind::device_to_host);
  });
}

dt_result_t dt_model_set_tensor(dt_model_t model, const char* name, const float* src, size_t count) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    const dtrain::ParamInfo& p = tensor(m, name);
    need_ptr(src, "src");
    if (count != p.local_numel())
      fail(DT_ERR_INVALID_ARGUMENT, "count is " + std::to_string(count) + " but tensor '" + p.name +
                                        "' has " + std::to_string(p.local_numel()) + " elements");
    write_tensor(m, p, src);
  });
}

}  // extern "C"
