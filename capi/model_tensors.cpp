// A built-in model's parameters: all of them at once, or one tensor by name or index; its
// step count.
#include <cstring>
#include <string>

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
    need_ptr(dst, "dst");
    dtrain::ParameterStore& ps = m.params();
    need(capacity >= total_numel(ps), "capacity is smaller than dt_model_num_parameters()");
    for (const dtrain::ParamInfo& p : ps) {
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
    const dtrain::ParamInfo& p = tensor(m, name);
    need_ptr(dst, "dst");
    need(capacity >= p.local_numel(), "capacity is smaller than the tensor's element count");
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
    m.device().copy(m.params().param(p), src, count * sizeof(float), dtrain::CopyKind::host_to_device);
  });
}

}  // extern "C"
